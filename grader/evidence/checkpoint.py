"""The checkpoint a run left at a path: does it load, hold the final parameters, come from one
writer (the save trace). Shared by the checks that need a final checkpoint."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.evidence.params import compare, strip_wrappers
from grader.files import why_not_readable

CHECKPOINT_CAP = 512 * 2**20  # the exercises' checkpoints are megabytes; a larger file is not loaded


@dataclass
class FinalCheckpoint:
    ok: bool
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    content: Any = None  # the loaded checkpoint, when it loaded


def writers_of(ev, path: Path) -> list[int]:
    """Ranks that wrote ``path`` (directly, or by renaming or copying a file into it)."""
    state = ev.file_history.get(str(Path(path).resolve()))
    return sorted(state.writers) if state else []


def final_checkpoint(ev, rel_path: str, key: str | None = None, require_keys: list[str] = (),
                     single_writer: bool = True, rtol: float = 1e-5, atol: float = 1e-6) -> FinalCheckpoint:
    """``rel_path`` is relative to the run's working dir."""
    work = Path(ev.run_dir) / "work"
    path = work / rel_path
    evidence: dict[str, Any] = {"path": rel_path}
    if not os.path.lexists(path):
        return FinalCheckpoint(False, f"no checkpoint at {rel_path} after the run", evidence)
    why = why_not_readable(path, within=work, cap=CHECKPOINT_CAP)
    if why:
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} {why}", evidence)
    try:
        import torch

        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} does not load: "
                               f"{type(e).__name__}: {str(e).splitlines()[0][:200]}", evidence)
    if not isinstance(ckpt, dict):
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} holds a {type(ckpt).__name__}, "
                               "not a dict of state", evidence)
    missing = [k for k in require_keys if k not in ckpt]
    evidence["keys"] = sorted(map(str, ckpt))[:20]
    if missing:
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} has no {', '.join(missing)} "
                               f"(it holds: {', '.join(evidence['keys'])})", evidence)
    state = ckpt.get(key) if key else ckpt
    if not isinstance(state, dict):
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} has no model state under "
                               f"{key!r}", evidence)
    writers = writers_of(ev, path)
    evidence["writers"] = writers
    if single_writer and len(writers) > 1:
        return FinalCheckpoint(False, f"ranks {' and '.join(map(str, writers))} all wrote {rel_path} "
                               "(from the save trace): which one's bytes it holds depends on who finished last",
                               evidence)
    if ev.status != "ok":
        return FinalCheckpoint(False, f"the checkpoint loads, but {ev.describe()} did not complete, so it "
                               "cannot hold the final parameters", evidence)
    final = ev.params(0)
    if final is None:
        return FinalCheckpoint(False, "rank 0 left no final parameters to compare the checkpoint with", evidence)
    saved = {strip_wrappers(k): v for k, v in state.items() if hasattr(v, "shape")}
    saved = {k: v for k, v in saved.items() if k in final}
    cmp = compare(saved, final, rtol, atol, equal_nan=True)  # a NaN state saved as it is, is the state
    evidence.update(cmp)
    if not cmp["same_names"]:
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} lacks parameters the model trained "
                               f"(e.g. {', '.join(cmp['only_second'])})", evidence)
    if not cmp["close"]:
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} is not the final model: largest difference "
                               f"{cmp.get('max_abs_diff', float('nan')):.3g} in {cmp.get('worst_param')}", evidence)
    return FinalCheckpoint(True, f"the checkpoint at {rel_path} loads and holds the final parameters", evidence,
                           ckpt)
