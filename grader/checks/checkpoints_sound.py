"""checkpoints_sound: the checkpoints a script writes, judged from outside it.

Evidence: the save trace (``harness/saves.py``: every ``torch.save``, rename, copy and
``torch.load`` of a file, and every file ``torch.distributed.checkpoint`` writes or reads, per rank,
signed), the files left in each run's working directory, and the parameter fingerprints the
bootstrap records around a restart. Runs judged: ``main`` and the restarted ones, ``resume`` (a
rank SIGKILLed between checkpoints) and ``resume_save`` (every rank's first checkpoint write after
a step torn half-way by a SIGKILL).

A checkpoint is what a restart reads as one (``grader.evidence.saves.checkpoint_units``): a single file, a
folder of files published by one rename (model, optimizer, scheduler, trainer state, as the HF
Trainer lays it out), or a DCP folder (per-rank files and the ``.metadata`` that lists them,
written last). A run passes when

- every checkpoint on disk at its end loads as a whole (a file with ``torch.load(weights_only=True)``,
  a DCP folder with every file its metadata lists), and what each restart read, all of it together,
  holds what the manifest requires (model parameters, optimizer state that is not hollow, scheduler
  state: recognised by content, not by key or file names);
- no file was written by more than one rank;
- no file a restart reads was ever written in place (``torch.save`` or a copy straight into it), no
  folder was published while a file in it was still being written or written into after, and no
  DCP checkpoint was committed while a file its metadata lists held nothing complete, so a reader
  can never meet a half-written checkpoint;
- each restart completed, and began from the newest checkpoint that was complete on disk when it
  began: not from the initial parameters (checkpointing or resume disabled), not from an older one.
  Where it began comes from parameter fingerprints, not from anything the script says.

"Checkpoints" are those a restart read (in any run of the grading, by their path in the working
directory), those a rename or copy published (DCP folders and folders renamed into place included),
and files written in place by a rank that renamed nothing in that run. A staging file or folder
left half-written by the kill is not one: nothing reads it. Files written by other means than the
traced calls are not seen (``docs/run-dir.md``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from grader.checks._path import not_killed
from grader.checks.base import Check, CheckResult, CheckSpec, Context, need
from grader.evidence import RunEvidence
from grader.evidence.contents import missing_state, summary
from grader.evidence.fingerprints import resume_point
from grader.evidence.layouts import LayoutError, load_checkpoint
from grader.evidence.saves import FileOp, Unit, unit_of
from grader.roles import FINGERPRINTS, Role, RunRequest
from harness.launch import Fault

if TYPE_CHECKING:
    from grader.manifest import Manifest

RESTARTS: dict[str, str] = {Role.RESUME: "killed mid-run", Role.RESUME_SAVE: "killed during a checkpoint write"}


class Spec(CheckSpec):
    """The checkpoints a script writes, judged from the save trace and the files, in the main run
    and in two restarted ones: ``kill_rank`` SIGKILLed after step ``kill_step`` (between
    checkpoints), and every rank's first checkpoint write at or after ``save_kill_step`` torn
    half-way by a SIGKILL. Each restart must resume from the newest complete checkpoint."""

    name: Literal["checkpoints_sound"]
    # what a checkpoint that a resume reads must hold, recognised by content, not by key names
    require: list[Literal["model", "optimizer", "scheduler", "scaler"]] = ["model", "optimizer"]
    kill_rank: int = Field(1, ge=0)
    kill_step: int = Field(gt=0, description="SIGKILL after this optimizer step, between two checkpoints")
    save_kill_step: int | None = Field(None, gt=0, description="tear the first checkpoint write at or "
                                       "after this step; leave out to skip that restart")


def runs(spec: Spec, manifest: Manifest) -> list[RunRequest]:
    """A kill between checkpoints (shared with sample_partition's when both ask for one), and a
    kill half-way through a checkpoint write, on whichever ranks write checkpoints."""
    w = manifest.world_size
    out = [RunRequest(Role.RESUME, w, max_restarts=1, faults=(Fault(rank=spec.kill_rank, step=spec.kill_step),),
                      env=FINGERPRINTS)]
    if spec.save_kill_step:
        out.append(RunRequest(Role.RESUME_SAVE, w, max_restarts=1,
                              faults=tuple(Fault(rank=r, step=spec.save_kill_step, when="save") for r in range(w)),
                              env=FINGERPRINTS))
    return out


def _work(ev: RunEvidence) -> str:
    return os.path.realpath(Path(ev.run_dir) / "work")


def _rel(path: str, work: str) -> str:
    """A traced path relative to the run's working directory (absolute when outside it)."""
    real = os.path.realpath(path)
    return os.path.relpath(real, work) if real.startswith(work + os.sep) else real


def _loaded_units(ev: RunEvidence) -> dict[tuple[int, int], dict[str, set[str]]]:
    """Per restarted attempt (rank, attempt): the checkpoints it read (relative path) and, for each,
    the files of it that it read (relative to the checkpoint; "" for a single file)."""
    work = _work(ev)
    out: dict[tuple[int, int], dict[str, set[str]]] = {}
    for op in ev.file_loads:
        if op.attempt < 1 or not op.path:
            continue
        u = unit_of(op.path, ev.units)
        top = u.path if u is not None else op.path
        inner = "" if top == op.path else op.path[len(top) + 1:]
        out.setdefault((op.rank, op.attempt), {}).setdefault(_rel(top, work), set()).add(inner)
    return out


def _read_paths(runs: dict[str, RunEvidence]) -> set[str]:
    """Checkpoints a restarted attempt read, in any run, relative to the working directory."""
    return {rel for ev in runs.values() for units in _loaded_units(ev).values() for rel in units}


def checkpoint_units(ev: RunEvidence, read: set[str]) -> dict[str, Unit]:
    """The run's checkpoints (relative path -> unit), whether or not they still exist: see above."""
    work = _work(ev)
    renamers = {o.rank for o in ev.file_ops if o.op == "rename"}
    out = {}
    for path, u in ev.units.items():
        rel = _rel(path, work)
        if u.kind != "file":
            keep = rel in read or bool(u.versions)
        else:
            st = ev.file_history.get(path)
            keep = rel in read or bool(st and st.published) or any(
                o.op in ("save", "copy") and o.rank not in renamers for o in ev.file_ops if o.path == path)
        if keep:
            out[rel] = u
    return out


class Problems:
    """What a run got wrong, by kind; the message shows the first of each kind, most telling first."""

    ORDER = ("restart", "torn", "in_place", "files", "writers")

    def __init__(self) -> None:
        self.by_kind: dict[str, list[str]] = {k: [] for k in self.ORDER}

    def add(self, kind: str, text: str) -> None:
        self.by_kind[kind].append(text)

    def __bool__(self) -> bool:
        return any(self.by_kind.values())

    def all(self) -> list[str]:
        return [t for k in self.ORDER for t in self.by_kind[k]]

    def message(self) -> str:
        parts = [ts[0] for ts in self.by_kind.values() if ts]
        extra = len(self.all()) - len(parts)
        return "; ".join(parts) + (f" ({extra} more in the evidence)" if extra else "")


_LAYOUT = {"dcp": " (a torch.distributed.checkpoint)", "dir": " (a folder of files)", "file": ""}


class _Loaded:
    """Each checkpoint of a run loaded once, as a whole or by the files a restart read of it."""

    def __init__(self, ev: RunEvidence):
        self.work = Path(_work(ev))
        self.cache: dict[tuple[str, tuple[str, ...] | None], tuple[Any, str | None]] = {}

    def get(self, rel: str, unit: Unit | None, files: set[str] | None = None) -> tuple[Any, str | None]:
        """``files``: for a folder, only these of its files (relative); every traced one when None."""
        kind = unit.kind if unit is not None else "file"
        names = None
        if unit is not None and kind == "dir":
            names = sorted(files - {""}) if files else sorted(
                p[len(unit.path) + 1:] for p in unit.files_seen if os.path.lexists(p))
        k = (rel, tuple(names) if names is not None else None)
        if k not in self.cache:
            try:
                self.cache[k] = (load_checkpoint(self.work / rel, self.work, names), None)
            except LayoutError as e:
                self.cache[k] = (None, str(e))
        return self.cache[k]


def _files(role: str, ev: RunEvidence, read: set[str], spec: Spec, expected: dict[str, Any] | None, problems: Problems,
           loaded: _Loaded) -> dict[str, Any]:
    """Every checkpoint on disk at the end loads as a whole; what each restart read holds the state."""
    out: dict[str, Any] = {}
    for rel, unit in sorted(checkpoint_units(ev, read).items()):
        path = loaded.work / rel
        if not os.path.lexists(path) or (unit.kind == "file" and os.path.isdir(path)):
            continue
        obj, err = loaded.get(rel, unit)
        info: dict[str, Any] = {"loads": err is None, "read_by_a_restart": rel in read, "layout": unit.kind}
        if err:
            info["error"] = err
            problems.add("files", f"{rel}{_LAYOUT[unit.kind]} on disk at the end of the {role} run does not load "
                                  f"({err})")
        out[rel] = info
    said: set[tuple[str, ...]] = set()
    for (rank, _attempt), units in sorted(_loaded_units(ev).items()):
        whole: dict[str, Any] = {}
        for rel, files in sorted(units.items()):
            traced = ev.units.get(str(loaded.work / rel))
            obj, err = loaded.get(rel, traced, files if traced is not None and traced.kind == "dir" else None)
            if err is None:
                whole[rel] = obj
        if not whole:
            continue  # nothing it read loads now: the files problem above says so
        lacks = missing_state(whole, spec.require, expected)
        names = tuple(sorted(whole))
        if lacks and names not in said:
            said.add(names)
            for rel in names:
                out.setdefault(rel, {})["lacks"] = lacks
            if len(names) == 1 and (ev.units.get(str(loaded.work / names[0])) or Unit("", "file")).kind == "file":
                problems.add("files", f"{names[0]}, a file a restart loads, holds no {' and no '.join(lacks)} "
                             f"(it holds {summary(whole[names[0]])})")
            else:
                problems.add("files", f"what rank {rank}'s restart in the {role} run loaded ({', '.join(names)}) "
                             f"holds no {' and no '.join(lacks)}")
    return out


def _writers(role: str, ev: RunEvidence, read: set[str], problems: Problems) -> dict[str, list[int]]:
    work = _work(ev)
    shared: dict[str, list[int]] = {}
    first_seen = None
    ckpts = set(checkpoint_units(ev, read))
    for path, st in sorted(ev.file_history.items()):
        if len(st.writers) < 2:
            continue
        rel = _rel(path, work)
        if rel not in ckpts and all(o.op == "bytes" for o in ev.file_ops if o.path == path):
            continue  # a binary file of the script's own that nothing publishes or reads: not a checkpoint
        shared[rel] = sorted(st.writers)
        if first_seen is None:
            first: dict[int, FileOp] = {}
            for o in ev.file_ops:
                if o.path == path:
                    first.setdefault(o.rank, o)
            ordered = sorted(first.values(), key=lambda o: o.t_begin)
            first_seen = (rel, ordered[1] if len(ordered) > 1 else ordered[0])
    if first_seen:
        rel, o = first_seen
        who = " and ".join(map(str, shared[rel]))
        more = f", and {len(shared) - 1} more files likewise" if len(shared) > 1 else ""
        problems.add("writers", f"ranks {who} {'both' if len(shared[rel]) == 2 else 'all'} wrote {rel} in the "
                     f"{role} run (rank {o.rank} at step {o.step}){more}")
    return shared


def _in_place(role: str, ev: RunEvidence, read: set[str], problems: Problems) -> list[dict[str, Any]]:
    """Writes straight into a file a restart reads, writes into a checkpoint file that never
    finished (whether or not anything read it afterwards), and checkpoints of several files that a
    reader could meet half-written: a folder published while a file in it was still being written,
    or written into after; a DCP checkpoint committed while a file it lists held nothing complete,
    or rewritten in place."""
    work = _work(ev)
    units = checkpoint_units(ev, read)
    files = {r for r, u in units.items() if u.kind == "file"}
    found = []
    # (its destination, the op): a save, copy or write always has one
    writes = [(o.path, o) for o in ev.file_ops if o.op in ("save", "copy", "bytes") and o.path]
    torn = [(p, o) for p, o in writes if o.t_end is None and _rel(p, work) in files]
    direct = [(p, o) for p, o in writes if o.t_end is not None and _rel(p, work) in read and _rel(p, work) in files]
    for p, o in torn + direct[:1]:
        found.append({"path": _rel(p, work), "rank": o.rank, "step": o.step, "attempt": o.attempt,
                      "op": o.op, "finished": o.t_end is not None})
    if torn:
        p, o = torn[0]
        loaded = any(lo.path == p and lo.attempt > o.attempt for lo in ev.file_loads)
        problems.add("torn", f"in the {role} run rank {o.rank} was killed half-way through a {_call(o)} "
                     f"straight into {_rel(p, work)} (step {o.step})"
                     + (", and the restarted job then loaded that file" if loaded else ""))
    if direct:
        p, o = direct[0]
        problems.add("in_place", f"{_call(o)} wrote straight into {_rel(p, work)}, a file a restart loads "
                     f"(rank {o.rank} at step {o.step}, {role} run)")
    for rel, u in sorted(units.items()):
        if u.kind == "file":
            continue
        what = "committed (its .metadata written" if u.kind == "dcp" else "published (renamed into place"
        for v in u.versions:
            if v.early:
                w = v.early[0]
                found.append({"path": rel, "early": _rel(w.dest, work), "rank": w.rank, "step": v.by.step})
                problems.add("torn", f"in the {role} run {rel} was {what} at step {v.by.step}) while "
                             f"{Path(w.dest).name} in it was still being written (rank {w.rank})")
            elif v.missing:
                found.append({"path": rel, "missing": v.missing[:5], "step": v.by.step})
                listed = ", which its metadata lists," if u.kind == "dcp" else ""
                problems.add("torn", f"in the {role} run {rel} was {what} at step {v.by.step}) while "
                             f"{v.missing[0]}{listed} held nothing complete")
        if u.late:
            o = u.late[0]
            found.append({"path": rel, "late": _rel(o.dest, work), "rank": o.rank, "step": o.step,
                          "finished": o.t_end is not None})
            problems.add("in_place", f"{_call(o)} wrote into {_rel(o.dest, work)} after {rel} was "
                         f"{'committed' if u.kind == 'dcp' else 'published'} (rank {o.rank} at step {o.step}, "
                         f"{role} run): a reader of the checkpoint could meet it half-written")
    return found


def _call(o: FileOp) -> str:
    return {"save": "torch.save", "copy": "file copy", "write": "DCP write", "rename": "rename",
            "bytes": "a binary write with open()"}.get(o.op, o.op)


def _restart(role: str, ev: RunEvidence, read: set[str], problems: Problems) -> dict[str, Any]:
    how = RESTARTS.get(role, "killed")
    faults = (ev.run.get("config") or {}).get("faults") or []
    info: dict[str, Any] = {"status": ev.status, "faults": faults}
    attempts = max((o.attempts for o in ev.ranks.values()), default=0)
    info["attempts"] = attempts
    if attempts < 2:
        if faults and faults[0].get("when") == "save":
            problems.add("restart", f"no rank began a checkpoint write (torch.save to a file, or a file of a "
                         f"torch.distributed.checkpoint) at or after step "
                         f"{faults[0]['step']} in the {role} run, so the job was never killed during one")
        else:
            f = faults[0] if faults else {"rank": "?", "step": "?"}
            problems.add("restart", f"in the {role} run rank {f['rank']} was to be killed after step {f['step']}, "
                         "but the job never restarted (it made fewer steps?)")
        return info
    unkilled = not_killed(ev, role)
    if unkilled:
        problems.add("restart", unkilled)
        return info
    if ev.status != "ok":
        fail = ev.run.get("failure") or {}
        err = (fail.get("error") or "").strip().splitlines()
        rank = fail.get("rank")
        obs = ev.ranks.get(rank) if isinstance(rank, int) else None
        where = f" at {obs.last_location}" if obs is not None and obs.last_location else ""
        why = f": rank {fail.get('rank')} raised {err[-1][:200]}{where}" if err else ""
        problems.add("restart", f"the job {how} did not complete after its restart (status {ev.status}){why}")
        return info
    # The newest checkpoint complete on disk when the restart began.
    t_restart = min((r["t"] for rank in ev.ranks for r in ev.events(rank)
                     if r.get("attempt", 0) >= 1 and "t" in r), default=float("inf"))
    newest: tuple[int, str] | None = None
    for rel, unit in checkpoint_units(ev, read).items():
        for v in unit.complete_versions():
            if v.attempt == 0 and v.t < t_restart and (newest is None or v.step > newest[0]):
                newest = (v.step, rel)
    info["newest_checkpoint_step"] = newest[0] if newest else None
    points = {r: resume_point(ev, r) for r in sorted(ev.ranks)}
    info["resumed_from_step"] = points
    for r, c in points.items():
        if not any(e.get("kind") == "step" and e.get("attempt") == 1 for e in ev.events(r)):
            problems.add("restart", f"after the restart in the {role} run rank {r} made no optimizer step")
            break
        if newest is None:
            problems.add("restart", f"no checkpoint was complete on disk when the {role} run restarted"
                         + (": the job began again from the initial parameters" if c == 0 else ""))
            break
        if c is None:
            problems.add("restart", f"after the restart in the {role} run rank {r} began from parameters the "
                         "job never had before the kill (not the initial ones, nor those after any step)")
            break
        if c != newest[0]:
            began = "the initial parameters" if c == 0 else f"the parameters after step {c}"
            problems.add("restart", f"after the restart in the {role} run rank {r} began from {began}, "
                         f"although the checkpoint of step {newest[0]} ({newest[1]}) was complete on disk")
            break
    return info


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "checkpoints_sound"
    roles: list[str] = [Role.MAIN, Role.RESUME, *([Role.RESUME_SAVE] if spec.save_kill_step else [])]
    runs: dict[str, RunEvidence] = {}
    for role in roles:
        ev = need(ctx, name, role, ok_only=False)
        if isinstance(ev, CheckResult):
            return ev
        runs[role] = ev
    ref = ctx.runs.get("reference")
    base = next((p for p in (runs["main"].params(0), ref.params(0) if ref else None) if p), None)
    expected = base or None  # the final parameters: a checkpoint's model is matched by their structure
    read = _read_paths(runs)
    problems = Problems()
    evidence: dict[str, Any] = {"read_by_restarts": sorted(read), "require": list(spec.require), "runs": {}}
    for role, ev in runs.items():
        e: dict[str, Any] = {}
        evidence["runs"][role] = e
        if role in RESTARTS:
            e["restart"] = _restart(role, ev, read, problems)
        e["shared_files"] = _writers(role, ev, read, problems)
        e["written_in_place"] = _in_place(role, ev, read, problems)
        e["files"] = _files(role, ev, read, spec, expected, problems, _Loaded(ev))
    if problems:
        evidence["problems"] = problems.all()
        return CheckResult(name, False, problems.message(), evidence)
    n = sum(len(e["files"]) for e in evidence["runs"].values())
    restarts = ", ".join(r for r in runs if r in RESTARTS)
    layouts = sorted({i.get("layout", "file") for e in evidence["runs"].values() for i in e["files"].values()})
    kinds = {"file": "files", "dir": "folders of files", "dcp": "torch.distributed.checkpoint folders"}
    return CheckResult(name, True, f"{n} checkpoints ({', '.join(kinds[k] for k in layouts)}) over {len(runs)} runs "
                       f"load, each file written by one rank and never in place where a restart reads; the restarts "
                       f"({restarts}) began from the newest complete checkpoint", evidence)


CHECK = Check("checkpoints_sound", Spec, judge, runs=runs,
              property='every checkpoint on disk loads whole, has one writer, is never seen half-written, and each restart resumes from the newest')
