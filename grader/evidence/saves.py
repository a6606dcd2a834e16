"""Reading the checkpoint-write trace back (``saves.jsonl``, written by ``harness.saves``; its
schema is docs/run-dir.md's): begin and end records paired into operations (``file_ops``), one
replay per destination path of what it held over time (``file_history``), and the checkpoints those
files make up (``checkpoint_units``). Pure functions over verified records, shared by the checks.

Each operation keeps the rank's own times (``t_begin``, ``t_end``: what the rank claims) and, where
the run had the record channel, the parent's receipt of its begin and end records (``rt_begin``,
``rt_end``: the parent's clock, which the rank cannot shape)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FileOp:
    """One traced operation, begin and end paired."""

    rank: int
    attempt: int
    seq: int
    op: str  # save | rename | copy | write | bytes | commit | load | upload
    path: str | None  # the destination (for a load: the file read; for a commit: the checkpoint's folder)
    src: str | None
    step: int  # optimizer steps done in this attempt when it began
    main: bool  # on the main thread (the step loop waited for it)
    t_begin: float
    t_end: float | None = None  # None: it never finished (the rank died mid-write)
    dur: float | None = None
    bytes: int | None = None
    error: str | None = None
    fp: dict[str, float] | None = None  # what it serialised, by tensor path (save: at begin; write: at end)
    keys: list[str] | None = None  # save of a dict, or a commit: the top-level keys
    fp_changed: bool = False  # the saved tensors changed while the write ran
    ints: dict[str, int] | None = None  # save of a dict: its integers in the top two levels (``scalar_ints``)
    is_dir: bool = False  # rename: a whole directory moved
    files: list[str] | None = None  # commit: the files (relative to its folder) its metadata lists
    upload_id: int | None = None  # upload: the store service's receipt
    sha256: str | None = None  # upload: the object's digest, as the service computed it
    rt_begin: float | None = None  # the parent's receipt of the begin record (None: no record channel)
    rt_end: float | None = None  # the parent's receipt of the end record

    @property
    def completed(self) -> bool:
        return self.t_end is not None and self.error is None

    @property
    def dest(self) -> str:
        """The path of a write the history replayed (only ops with a path are replayed)."""
        if self.path is None:
            raise ValueError(f"a {self.op} without a path has no place in a file's history")
        return self.path

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.rank, self.attempt, self.seq)


@dataclass
class FileState:
    """What one destination path held over time.

    ``timeline``: (time, the write whose bytes the path holds), or (time, None) while a write into
    it runs, after a write into it failed or died, and after it was renamed away (deletions are not
    traced: a removed file still counts as held). ``versions``: (time it became complete, the write
    that put it there). ``torn``: writes into this very path that never ended. ``published``: a
    rename or copy put a version here. ``early``: (rename, write) when a rename published this path
    (or the folder it is in) while a write into it was still running: a reader could meet it
    half-written."""

    path: str
    versions: list[tuple[float, FileOp]] = field(default_factory=list)
    writers: set[int] = field(default_factory=set)  # ranks that wrote this path
    torn: list[FileOp] = field(default_factory=list)
    timeline: list[tuple[float, FileOp | None]] = field(default_factory=list)
    published: bool = False
    early: list[tuple[FileOp, FileOp]] = field(default_factory=list)

    def held_at(self, t: float) -> FileOp | None:
        """The write whose bytes the path held at time ``t`` (None: nothing complete)."""
        i = bisect.bisect_right([x for x, _ in self.timeline], t)
        return self.timeline[i - 1][1] if i else None


WRITES = ("save", "rename", "copy", "write", "bytes")
_CONTENT = ("save", "copy", "write", "bytes")  # writes that put bytes into their path themselves


def file_ops(records_by_rank: dict[int, list[dict[str, Any]]],
             kinds: tuple[str, ...] = WRITES) -> list[FileOp]:
    """Pair begin/end records into operations of the given kinds (writes unless asked for
    ``("load",)``, ``("commit",)`` or ``("upload",)``), in order of their start."""
    ops: list[FileOp] = []
    for rank, recs in records_by_rank.items():
        open_ops: dict[tuple[int, int], FileOp] = {}
        for r in recs:
            k = (int(r.get("a", 0)), int(r.get("seq", -1)))
            if r.get("ph") == "begin" and r.get("op", "?") not in kinds:
                continue
            if r.get("ph") == "begin":
                files = r.get("files")
                op = FileOp(rank=rank, attempt=k[0], seq=k[1], op=r.get("op", "?"), path=r.get("path"),
                            src=r.get("src"), step=int(r.get("step", 0)), main=bool(r.get("main", True)),
                            t_begin=float(r.get("t", 0.0)), rt_begin=_num(r.get("rt")),
                            fp=r.get("fp"), keys=r.get("keys"),
                            ints=r.get("ints") if isinstance(r.get("ints"), dict) else None,
                            is_dir=bool(r.get("dir", False)),
                            files=[str(f) for f in files] if isinstance(files, list) else None)
                open_ops[k] = op
                ops.append(op)
            elif k in open_ops:
                op = open_ops.pop(k)
                op.t_end, op.dur, op.rt_end = float(r.get("t", 0.0)), r.get("dur"), _num(r.get("rt"))
                op.bytes = r.get("bytes")
                op.fp_changed = bool(r.get("fp_changed", False))
                if isinstance(r.get("fp"), dict):  # a DCP write: what went into the file, as it went
                    op.fp = r["fp"]
                if r.get("id") is not None:
                    op.upload_id = int(r["id"])
                    op.sha256 = r.get("sha256")
                if r.get("ph") == "error":
                    op.error = r.get("err", "error")
    return sorted(ops, key=lambda o: (o.t_begin, o.rank, o.seq))


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _under(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip("/") + "/")


def file_history(ops: list[FileOp]) -> dict[str, FileState]:
    """One replay of the trace, per destination path, in time order (a write's begin, then its end).

    A write straight into a path leaves it holding nothing complete while the write runs, and for
    good if the writer died mid-write. A completed save (or DCP write) puts its own bytes there; a
    completed copy puts what its source held (a copy of a file the trace never saw written holds
    the copy's own bytes, of unknown content); a completed rename moves what its source held and
    leaves the source empty. A rename of a directory moves every path under it (and empties what
    the destination folder held: a folder is renamed only onto an absent or empty one). A write
    still running when a rename moves its file finishes into the new path, and the new path records
    that it was published early."""
    events: list[tuple[float, int, bool, FileOp, str]] = []  # (t, seq, is_end, op, its destination)
    for op in ops:
        if op.path is None or op.op not in WRITES:
            continue
        if op.op in _CONTENT:
            events.append((op.t_begin, op.seq, False, op, op.path))
        if op.t_end is not None:
            events.append((op.t_end, op.seq, True, op, op.path))
    states: dict[str, FileState] = {}
    now: dict[str, FileOp | None] = {}  # path -> the write whose bytes it holds now (None: nothing)
    running: dict[str, FileOp] = {}  # path -> a write into it still running
    moved: dict[tuple[int, int, int], str] = {}  # a running write whose file was renamed: where it now is
    # path -> the ranks that began a write into it since it was last moved away: a rename publishes
    # all of them (two ranks racing through one .tmp name are both the final file's writers, even
    # when the second rename fails because the first took the file)
    wrote_since: dict[str, set[int]] = {}

    def state(p: str) -> FileState:
        return states.setdefault(p, FileState(p))

    def put(path: str, t: float, held: FileOp | None) -> None:
        now[path] = held
        state(path).timeline.append((t, held))
        if held is not None:
            state(path).versions.append((t, held))

    def move(src: str, dst: str, t: float, op: FileOp) -> None:
        held = now.get(src)
        if src in now:
            put(src, t, None)
        if held is not None:
            state(dst).writers.add(held.rank)
        state(dst).writers.update(wrote_since.pop(src, ()))
        put(dst, t, held)
        state(dst).published = True
        w = running.pop(src, None)
        if w is not None and w.attempt != op.attempt:  # its writer died with an earlier attempt: torn
            w = None
        if w is not None:  # still being written: it lands in dst, which a reader can already open
            running[dst] = w
            moved[w.key] = dst
            state(dst).early.append((op, w))

    for t, _, is_end, op, dest in sorted(events, key=lambda e: (e[0], e[1], e[2])):
        path = moved.get(op.key, dest)
        if not is_end:
            put(path, t, None)
            state(path).writers.add(op.rank)
            wrote_since.setdefault(path, set()).add(op.rank)
            running[path] = op
            if op.t_end is None:  # the writer died mid-write
                state(path).torn.append(op)
            continue
        if op.op in _CONTENT:
            if running.get(path) is op:
                running.pop(path)
            if not op.completed:
                put(path, t, None)
                state(path).torn.append(op)
            elif op.op == "copy":
                put(path, t, (now.get(op.src) or op) if op.src else op)
                state(path).published = True
            else:
                put(path, t, op)
        elif op.op == "rename" and op.src and op.completed:
            src = op.src
            inside = sorted({p for p in (*now, *running) if _under(p, src)})
            if op.is_dir or inside:
                for p in [p for p in now if _under(p, dest)]:  # the folder it replaces was empty
                    if p not in [dest + q[len(src):] for q in inside]:
                        put(p, t, None)
                for p in inside:
                    move(p, dest + p[len(src):], t, op)
            else:
                move(src, dest, t, op)
        elif op.op == "rename" and not op.completed:
            continue
    return states


# -- checkpoints that span several files ----------------------------------------------------------

METADATA = ".metadata"  # DCP's index of a checkpoint; written last (aside, then renamed)


@dataclass
class UnitVersion:
    """One version of a checkpoint: the moment it became whole (or claimed to), and the write whose
    bytes each of its files held then."""

    t: float
    by: FileOp  # what published it: the save/rename/copy of a file, a folder's rename, DCP's commit
    files: dict[str, FileOp]  # relative path in the checkpoint ("" for a single file) -> write
    missing: list[str] = field(default_factory=list)  # files it needs that held nothing complete then
    early: list[FileOp] = field(default_factory=list)  # writes still running when it was published
    dcp: bool = False  # a DCP checkpoint: its files' tensors carry their full names already
    keys: list[str] | None = None  # a DCP checkpoint's top-level keys, from its commit

    @property
    def complete(self) -> bool:
        return not self.missing and not self.early and bool(self.files)

    @property
    def step(self) -> int:
        """The step its state is from, as far as the trace tells: its files' writes began then."""
        return min((o.step for o in self.files.values()), default=self.by.step)

    @property
    def attempt(self) -> int:
        return self.by.attempt

    def merged(self) -> FileOp:
        """One operation standing for the whole checkpoint (for the checks written for one file):
        fingerprints and keys of every file, prefixed by the file's name without its suffix, the
        bytes of all of them."""
        if list(self.files) == [""]:
            return self.files[""]
        fp: dict[str, float] | None = {}
        keys: set[str] = set(self.keys or [])
        for rel, o in self.files.items():
            stem = rel.rsplit("/", 1)[-1].split(".", 1)[0]
            if o.fp is None and o.op == "save":
                fp = None
            if fp is not None:
                prefix = "" if self.dcp else f"{stem}."
                fp.update({f"{prefix}{k}": v for k, v in (o.fp or {}).items()})
            if self.dcp:
                keys.update(k.split(".", 1)[0] for k in (o.fp or {}))
            else:
                keys.add(stem)
                keys.update(o.keys or [])
        return FileOp(rank=self.by.rank, attempt=self.by.attempt, seq=-(abs(self.by.seq) + 1), op="checkpoint",
                      path=self.by.path, src=None, step=self.step, main=self.by.main, t_begin=self.by.t_begin,
                      t_end=self.t, bytes=sum(o.bytes or 0 for o in self.files.values()), fp=fp,
                      keys=sorted(keys), fp_changed=any(o.fp_changed for o in self.files.values()))


@dataclass
class Unit:
    """A checkpoint as a restart reads it: one file, a folder published by one rename, or a DCP
    checkpoint (a folder of per-rank files whose ``.metadata`` lists them)."""

    path: str
    kind: str  # file | dir | dcp
    versions: list[UnitVersion] = field(default_factory=list)
    late: list[FileOp] = field(default_factory=list)  # writes into it after it was published
    files_seen: set[str] = field(default_factory=set)  # every traced path inside it

    def held_at(self, history: dict[str, FileState], t: float) -> UnitVersion | None:
        """The complete version a reader found at time ``t`` (None: none, or its files have been
        written into since it was published)."""
        best = None
        for v in self.versions:
            if v.t <= t:
                best = v
        if best is None or not best.complete:
            return None
        for rel, o in best.files.items():
            st = history.get(self.path if rel == "" else f"{self.path}/{rel}")
            if st is None or st.held_at(t) is not o:
                return None
        return best

    def complete_versions(self) -> list[UnitVersion]:
        return [v for v in self.versions if v.complete]


def checkpoint_units(ops: list[FileOp], history: dict[str, FileState],
                     commits: Sequence[FileOp] = ()) -> dict[str, Unit]:
    """Every path the trace saw written, grouped into checkpoints: DCP folders (a commit, or a
    ``.metadata`` written there), folders published by a directory rename, and single files."""
    units: dict[str, Unit] = {}
    dcp = {c.path for c in commits if c.path} | \
        {p.rsplit("/", 1)[0] for p in history if p.rsplit("/", 1)[-1] == METADATA}
    for d in sorted(dcp):
        u = units[d] = Unit(d, "dcp")
        u.files_seen = {p for p in history if _under(p, d)}
        def there(t: float, d: str = d, u: Unit = u) -> list[str]:
            return [p[len(d) + 1:] for p in u.files_seen if history[p].held_at(t) is not None
                    and not p.endswith(".tmp")]

        found: list[tuple[FileOp, list[str], float, FileOp | None]] = []
        # a completed op has its t_end (FileOp.completed): the comprehensions say so to the checker
        for c in commits:
            if c.path == d and c.completed and c.t_end is not None:
                found.append((c, [*(c.files or []), METADATA], c.t_end, c))
        for r in ops:
            if not (r.op == "rename" and r.completed and r.path == d and r.src) or r.t_end is None:
                continue
            r_end = r.t_end
            # committed elsewhere (a staging folder), then renamed into place: what that commit listed
            staged = [(c.t_end, c) for c in commits
                      if c.path == r.src and c.completed and c.t_end is not None and c.t_end <= r_end]
            last = max(staged, key=lambda e: e[0], default=None)
            commit = last[1] if last is not None else None
            found.append((r, [*(commit.files or []), METADATA] if commit is not None else there(r_end), r_end,
                          commit))
        if not found:  # nothing traced but its .metadata: each version lists what was there then
            found = [(made, there(t), t, None) for t, made in history.get(f"{d}/{METADATA}", FileState("")).versions]
        for by, rels, t, listed in sorted(found, key=lambda f: f[2]):
            v = _version(d, by, rels, history, t)
            v.dcp, v.keys = True, (listed.keys if listed is not None else None)
            u.versions.append(v)
        first = min((v.t for v in u.versions if v.complete), default=None)
        if first is not None:
            u.late = [o for o in ops if o.op in _CONTENT and o.path and _under(o.path, d)
                      and o.t_begin > first and not o.path.rsplit("/", 1)[-1].startswith(METADATA)]
    for r in ops:
        if r.op != "rename" or not r.completed or not r.path or not r.src or r.path in units:
            continue
        if not (r.is_dir or any(_under(p, r.path) for p in history)) or any(_under(r.path, d) for d in dcp):
            continue
        u = units.setdefault(r.path, Unit(r.path, "dir"))
        u.files_seen = {p for p in history if _under(p, r.path)}
    for d, u in units.items():
        if u.kind != "dir":
            continue
        pubs = [(r.t_end, r) for r in ops if r.op == "rename" and r.completed and r.path == d
                and r.t_end is not None]
        for r_end, r in pubs:
            rels = [p[len(d) + 1:] for p in u.files_seen if history[p].held_at(r_end) is not None
                    or any(e[0] is r for e in history[p].early)]
            v = _version(d, r, rels, history, r_end)
            v.early = [w for p in u.files_seen for ren, w in history[p].early if ren is r]
            u.versions.append(v)
        for o in ops:
            if o.op in _CONTENT and o.path and _under(o.path, d):
                before = [r for r_end, r in pubs if r_end < o.t_begin]
                if before:
                    u.late.append(o)
    for p, st in history.items():
        if any(_under(p, d) for d in units) or p in units:
            continue
        u = units[p] = Unit(p, "file")
        u.files_seen = {p}
        u.versions = [UnitVersion(t, made, {"": made}) for t, made in st.versions]
    return units


def _version(folder: str, by: FileOp, rels: list[str], history: dict[str, FileState], t: float) -> UnitVersion:
    files, missing = {}, []
    for rel in sorted(set(rels)):
        st = history.get(f"{folder}/{rel}")
        held = st.held_at(t) if st else None
        if held is None:
            missing.append(rel)
        else:
            files[rel] = held
    return UnitVersion(t, by, files, missing)


def unit_of(path: str, units: dict[str, Unit]) -> Unit | None:
    """The checkpoint a traced file belongs to (its folder's, when it is inside one)."""
    if path in units and units[path].kind == "file":
        return units[path]
    for d, u in units.items():
        if u.kind != "file" and (_under(path, d) or path == d):
            return u
    return units.get(path)
