"""The checkpoint a run left at a path: does it load, hold the final parameters, come from one
writer (the save trace). Shared by the checks that need a final checkpoint. The path may name a
file, a folder of files, or a torch.distributed.checkpoint folder (``grader/evidence/layouts.py``).
What it holds is recognised by content (``grader.evidence.contents``): the model state is any dict
whose tensors have the structure of the model the run trained, under whatever key."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.evidence import contents
from grader.evidence.layouts import LayoutError, load_checkpoint
from grader.evidence.params import compare
from grader.files import why_not_readable

if TYPE_CHECKING:
    from grader.evidence import RunEvidence

CHECKPOINT_CAP = 512 * 2**20  # the exercises' checkpoints are megabytes; a larger file is not loaded


@dataclass
class FinalCheckpoint:
    ok: bool
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    content: Any = None  # the loaded checkpoint, whenever it loaded (also when it is not the final state)


def writers_of(ev: RunEvidence, path: Path) -> list[int]:
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


def _keys(ckpt: dict[str, Any], folder: bool) -> list[str]:
    keys = set(map(str, ckpt))
    if folder:
        for v in ckpt.values():
            if isinstance(v, dict):
                keys.update(map(str, v))
    return sorted(keys)


def _written_at(ev: RunEvidence, path: Path) -> list[int] | None:
    """The step counts a checkpoint at ``path`` may hold as its step: the optimizer steps done when
    its last traced write (a save, or the rename or copy that published it) began, or one more (a
    script may store the index of the next step instead); None when no write was traced."""
    p = str(Path(path).resolve())
    ops = [o for o in ev.file_ops if o.path == p and o.completed and o.op in ("save", "rename", "copy", "write", "bytes")]
    if not ops:
        return None
    step = max(ops, key=lambda o: o.t_begin).step
    return [step, step + 1]


def final_checkpoint(ev: RunEvidence, rel_path: str, require: Sequence[str] = (), single_writer: bool = True,
                     rtol: float = 1e-5, atol: float = 1e-6) -> FinalCheckpoint:
    """The checkpoint at ``rel_path`` (relative to the run's working dir) loads, holds what
    ``require`` names (``grader.evidence.contents.KINDS``, recognised by content), and holds the
    run's final parameters (matched by structure, whatever the keys and the names)."""
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
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} holds {contents.summary(ckpt)}, "
                               "not a dict of state", evidence)
    evidence["keys"] = _keys(ckpt, folder)[:20]
    if folder:
        evidence["layout"] = "dcp" if (path / ".metadata").exists() else "dir"
    final = ev.params(0) if ev.status == "ok" else None
    writers = writers_of(ev, path)
    evidence["writers"] = writers
    if single_writer and len(writers) > 1:
        return FinalCheckpoint(False, f"ranks {' and '.join(map(str, writers))} all wrote {rel_path} "
                               "(from the save trace): which one's bytes it holds depends on who finished last",
                               evidence, ckpt)
    if ev.status != "ok":
        return FinalCheckpoint(False, f"the checkpoint loads, but {ev.describe()} did not complete, so it "
                               "cannot hold the final parameters", evidence, ckpt)
    if final is None:
        return FinalCheckpoint(False, "rank 0 left no final parameters to compare the checkpoint with", evidence, ckpt)
    states = contents.model_states(ckpt, final)
    if not states:
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} holds no model state with the structure of "
                               f"the model the run trained ({len(final)} tensors; it holds "
                               f"{contents.summary(ckpt)})", evidence, ckpt)
    best: tuple[str, dict[str, Any]] | None = None
    for where, state in states:  # the model may be saved twice (an EMA copy, a "best" copy): any one
        cmp = compare(state, final, rtol, atol, equal_nan=True)  # a NaN state saved as it is, is the state
        if best is None or cmp.get("max_abs_diff", float("inf")) < best[1].get("max_abs_diff", float("inf")):
            best = (where, cmp)
        if cmp["close"]:
            break
    assert best is not None  # states is not empty: the loop ran
    where, cmp = best
    evidence.update(cmp, model_at=where or "(top level)")
    if not cmp["close"]:
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} is not the final model: largest difference "
                               f"{cmp.get('max_abs_diff', float('nan')):.3g} in {cmp.get('worst_param')}",
                               evidence, ckpt)
    lacks = contents.missing_state(ckpt, [k for k in require if k != "model"], final, _written_at(ev, path))
    if lacks:
        return FinalCheckpoint(False, f"the checkpoint at {rel_path} holds no {' and no '.join(lacks)} "
                               f"(it holds {contents.summary(ckpt)})", evidence, ckpt)
    return FinalCheckpoint(True, f"the checkpoint at {rel_path} loads and holds the final parameters", evidence,
                           ckpt)
