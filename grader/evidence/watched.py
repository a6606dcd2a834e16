"""What the parent saw published at the watched paths (``harness/filewatch.py``: ``watch.jsonl``
and the kept copies in ``watched/``), and which optimizer step each version holds.

The save trace tells what a file holds when the rank wrote it with ``torch.save``; when it cannot
(bytes written with ``open().write`` and renamed into place, a writer process the bootstrap never
ran in), the kept copy of each version tells it instead: it is loaded (``weights_only``), its
tensors fingerprinted as the trace fingerprints a save (``harness.saves.tensor_fingerprints``),
and it becomes a ``FileOp`` (``op = "watched"``) that the checkpoint checks judge like a traced
save: which step's parameters it holds, which keys, how large.

``held_at`` merges the two for one path: the trace where it knows the bytes (a traced save with
fingerprints), nothing while a traced write into the path itself runs or after it tore, and the
watcher's newest version otherwise; a version rewritten in place counts as nothing from the last
poll that saw the old one to the poll that saw it (a reader could have met it half-written).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from grader.evidence.saves import FileOp
from harness import rundir
from harness.filewatch import KEPT_DIR, LOG

if TYPE_CHECKING:
    from grader.evidence import RunEvidence

STEP_SLACK_S = 1.0  # a version may hold a step whose record the parent received this long after it saw it
_SEQ0 = 10**6  # watched versions' ``seq``, negative: never a traced operation's


@dataclass
class Observation:
    kind: str  # version | absent | changing | not_kept
    path: str  # absolute, as the trace names paths
    t: float
    since: float | None
    in_place: bool = False
    bytes: int | None = None
    sha256: str | None = None
    kept: Path | None = None
    index: int = 0


@dataclass
class Watched:
    """Per absolute path, its observations in time order; each version's ``FileOp`` made once."""

    run_dir: Path
    by_path: dict[str, list[Observation]] = field(default_factory=dict)
    forged: int = 0
    _ops: dict[int, FileOp] = field(default_factory=dict, repr=False)

    def versions(self) -> list[Observation]:
        return sorted((o for obs in self.by_path.values() for o in obs if o.kind == "version"), key=lambda o: o.t)

    def by_digest(self, sha256: str, before: float) -> Observation | None:
        """The newest kept version with these bytes that the parent saw no later than ``before``."""
        found = [o for o in self.versions() if o.sha256 == sha256 and o.t <= before]
        return found[-1] if found else None

    def op(self, ev: RunEvidence, o: Observation) -> FileOp:
        if o.index not in self._ops:
            self._ops[o.index] = as_op(ev, o)
        return self._ops[o.index]


def read_watched(run_dir: Path, key: str, work_dir: Path) -> Watched | None:
    path = Path(run_dir) / LOG
    if not path.exists():
        return None
    recs = rundir.read_records(path, key)
    out = Watched(Path(run_dir), forged=recs.forged)
    for i, r in enumerate(recs.valid):
        try:
            full = str((Path(work_dir) / str(r["path"])).resolve())
            kept = Path(run_dir) / KEPT_DIR / str(r["kept"]) if r.get("kept") else None
            o = Observation(str(r["kind"]), full, float(r["t"]), r.get("since"), bool(r.get("in_place")),
                            r.get("bytes"), r.get("sha256"), kept, i)
        except (KeyError, TypeError, ValueError):
            continue
        out.by_path.setdefault(full, []).append(o)
    for obs in out.by_path.values():
        obs.sort(key=lambda o: o.t)
    return out


def _rank0_steps(ev: RunEvidence) -> list[tuple[float, int, int]]:
    """(time the parent received it, or the rank's time; attempt; step) of rank 0's step records."""
    out = []
    for r in ev.events(0):
        if r.get("kind") == "step":
            out.append((float(r.get("rt", r.get("t", 0.0))), int(r.get("attempt", 0)), int(r.get("step", 0))))
    return sorted(out)


def as_op(ev: RunEvidence, o: Observation) -> FileOp:
    """The version as an operation the checkpoint checks can judge (the artifact store's copies of
    what it received are read this way too): its fingerprints and keys from the kept copy;
    ``step``, the newest step rank 0 had made when the parent saw it; ``error``, why its content
    cannot be told."""
    steps = [s for s in _rank0_steps(ev) if s[0] <= o.t + STEP_SLACK_S]
    attempt, step = (steps[-1][1], max(s[2] for s in steps if s[1] == steps[-1][1])) if steps else (0, 0)
    op = FileOp(rank=0, attempt=attempt, seq=-(_SEQ0 + o.index), op="watched", path=o.path, src=None, step=step,
                main=False, t_begin=o.t, t_end=o.t, bytes=o.bytes)
    fp, keys, ints, why = _content(o)
    op.fp, op.keys, op.ints, op.error = fp, keys, ints, why
    return op


def _content(o: Observation) -> tuple[dict[str, float] | None, list[str] | None, dict[str, int] | None, str | None]:
    from grader.evidence.layouts import LayoutError, load_file
    from harness import saves

    if o.kept is None or not o.kept.is_file():
        return None, None, None, "the parent kept no copy of it"
    if o.sha256 and rundir.sha256_file(o.kept) != o.sha256:
        return None, None, None, "the parent's copy of it changed after it was taken"
    try:
        obj = load_file(o.kept, o.kept.parent)
    except LayoutError as e:
        return None, None, None, f"it does not load ({e})"
    keys = [str(k) for k in list(obj)[:64]] if isinstance(obj, dict) else None
    return saves.tensor_fingerprints(obj), keys, saves.scalar_ints(obj) or None, None


def _writing(ev: RunEvidence, path: str, t: float) -> bool:
    """A traced write into ``path`` itself was running at ``t``, or had died there before it."""
    for op in ev.file_ops:
        if op.path == path and op.op in ("save", "copy", "write") and op.t_begin <= t:
            if op.t_end is None or t < op.t_end or not op.completed:
                return True
    return False


def held_at(ev: RunEvidence, path: str, t: float) -> FileOp | None:
    """What ``path`` (absolute) held at ``t``, as a reader would have found it (docstring above)."""
    st = ev.file_history.get(path)
    traced = st.held_at(t) if st is not None else None
    if traced is not None and traced.fp is not None:
        return traced
    if traced is None and st is not None and _writing(ev, path, t):
        return None
    w: Watched | None = ev.watched
    obs = w.by_path.get(path, []) if w is not None else []
    i = bisect.bisect_right([o.t for o in obs], t)
    if w is None or i == 0:  # (no watch: no observations, i is 0)
        return traced
    nxt = obs[i] if i < len(obs) else None
    if nxt is not None and nxt.kind in ("version", "changing", "not_kept") and nxt.in_place \
            and nxt.since is not None and t > nxt.since:
        return None  # being rewritten in place: a reader could have met it half-written
    if nxt is not None and nxt.kind == "changing" and nxt.since is not None and t > nxt.since:
        return None
    cur = obs[i - 1]
    if cur.kind != "version":
        return traced if cur.kind == "not_kept" else None
    return w.op(ev, cur)

