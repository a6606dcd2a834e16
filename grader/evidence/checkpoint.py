"""The checkpoint a run left at a path: does it load, hold the final parameters, come from one
writer (the save trace). Shared by the checks that need a final checkpoint. The path may name a
file, a folder of files, or a torch.distributed.checkpoint folder (``grader/evidence/layouts.py``):
a folder's "keys" are its files' names (without suffix) and their top-level keys, and its model
state is the dict, in whichever file, that holds the model's parameters."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.evidence.layouts import LayoutError, load_checkpoint
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
    """Ranks that wrote ``path`` (directly, or by renaming or copying a file into it); for a folder,
    the ranks that wrote any one of its files more than once over, else all its writers."""
    p = str(Path(path).resolve())
    state = ev.file_history.get(p)
    if state is not None:
        return sorted(state.writers)
    inside = [st for q, st in ev.file_history.items() if q.startswith(p + "/")]
    shared = next((st for st in inside if len(st.writers) > 1), None)
    if shared is not None:
        return sorted(shared.writers)
    return sorted({w for st in inside for w in st.writers})[:1]


def _keys(ckpt: dict, folder: bool) -> list[str]:
    keys = set(map(str, ckpt))
    if folder:
        for v in ckpt.values():
            if isinstance(v, dict):
                keys.update(map(str, v))
    return sorted(keys)


def _model_state(ckpt: Any, names: set[str], depth: int = 3) -> dict | None:
    """The first dict holding every parameter in ``names`` (wrapper prefixes stripped)."""
    if isinstance(ckpt, dict):
        if names <= {strip_wrappers(str(k)) for k, v in ckpt.items() if hasattr(v, "shape")}:
            return ckpt
        if depth:
            for v in ckpt.values():
                found = _model_state(v, names, depth - 1)
                if found is not None:
                    return found
    return None


def final_checkpoint(ev, rel_path: str, key: str | None = None, require_keys: list[str] = (),
                     single_writer: bool = True, rtol: float = 1e-5, atol: float = 1e-6) -> FinalCheckpoint:
    """``rel_path`` is relative to the run's working dir."""
    work = Path(ev.run_dir) / "work"
    path = work / rel_path.rstrip("/")
    evidence: dict[str, Any] = {"path": rel_path}
    if not os.path.lexists(path):
        return FinalCheckpoint(False, f"no checkpoint at {rel_path} after the run", evidence)
    folder = path.is_dir() and not path.is_symlink()
    if not folder:
        why = why_not_readable(path, within=work, cap=CHECKPOINT_CAP)
        if why:
            return FinalCheckpoint(False, f"the checkpoint at {rel_path} {why}", evidence)
    try:
        ckpt = load_checkpoint(path, work)
    except LayoutError as e:
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} does not load: {e}", evidence)
    if not isinstance(ckpt, dict):
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} holds a {type(ckpt).__name__}, "
                               "not a dict of state", evidence)
    evidence["keys"] = _keys(ckpt, folder)[:20]
    if folder:
        evidence["layout"] = "dcp" if (path / ".metadata").exists() else "dir"
    missing = [k for k in require_keys if k not in _keys(ckpt, folder)]
    if missing:
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} has no {', '.join(missing)} "
                               f"(it holds: {', '.join(evidence['keys'])})", evidence)
    state = ckpt.get(key) if key else ckpt
    final = ev.params(0) if ev.status == "ok" else None
    if folder and not isinstance(state, dict) and final is not None:
        state = _model_state(ckpt, {strip_wrappers(n) for n in final})
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
