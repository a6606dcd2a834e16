"""checkpoints_sound: the checkpoints a script writes, judged from outside it.

Evidence: the save trace (``harness/saves.py``: every ``torch.save``, rename, copy and
``torch.load`` of a file, per rank, signed), the files left in each run's working directory, and
the parameter fingerprints the bootstrap records around a restart. Runs judged: ``main`` and the
restarted ones, ``resume`` (a rank SIGKILLed between checkpoints) and ``resume_save`` (every rank's
first checkpoint write after a step torn half-way by a SIGKILL).

A run passes when
- every checkpoint file on disk at its end loads with ``torch.load(weights_only=True)``, and those
  a restart read hold what the manifest requires (model parameters, optimizer state, scheduler
  state: recognised by content, not by key names);
- no file was written by more than one rank;
- no file a restart reads was ever written in place (``torch.save`` or a copy straight into it), so
  a reader can never meet a half-written one;
- each restart completed, and began from the newest checkpoint that was complete on disk when it
  began: not from the initial parameters (checkpointing or resume disabled), not from an older one.
  Where it began comes from parameter fingerprints, not from anything the script says.

"Checkpoint files" are the files a restart read (in any run of the grading, by their path in the
working directory), the files a rename or copy published, and the files written in place by a rank
that renamed nothing in that run. A staging file left half-written by the kill is not one: nothing
reads it. Files written by other means than the traced calls are not seen (``docs/run-dir.md``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need
from grader.evidence import RunEvidence
from grader.evidence.checkpoint import CHECKPOINT_CAP
from grader.evidence.fingerprints import resume_point
from grader.evidence.params import strip_wrappers
from grader.files import why_not_readable
from grader.roles import FINGERPRINTS, Role, RunRequest
from harness.launch import Fault
from harness.saves import FileOp

RESTARTS = {Role.RESUME: "killed mid-run", Role.RESUME_SAVE: "killed during a checkpoint write"}


class Spec(CheckSpec):
    """The checkpoints a script writes, judged from the save trace and the files, in the main run
    and in two restarted ones: ``kill_rank`` SIGKILLed after step ``kill_step`` (between
    checkpoints), and every rank's first checkpoint write at or after ``save_kill_step`` torn
    half-way by a SIGKILL. Each restart must resume from the newest complete checkpoint."""

    name: Literal["checkpoints_sound"]
    # what a checkpoint that a resume reads must hold, recognised by content, not by key names
    require: list[Literal["model", "optimizer", "scheduler"]] = ["model", "optimizer"]
    kill_rank: int = Field(1, ge=0)
    kill_step: int = Field(gt=0, description="SIGKILL after this optimizer step, between two checkpoints")
    save_kill_step: int | None = Field(None, gt=0, description="tear the first checkpoint write at or "
                                       "after this step; leave out to skip that restart")


def runs(spec: Spec, manifest) -> list[RunRequest]:
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


def _read_paths(runs: dict[str, RunEvidence]) -> set[str]:
    """Files a restarted attempt loaded, in any run, relative to the working directory."""
    out = set()
    for ev in runs.values():
        work = _work(ev)
        out |= {_rel(op.path, work) for op in ev.file_loads if op.attempt > 0 and op.path}
    return out


def checkpoint_files(ev: RunEvidence, read: set[str]) -> set[str]:
    """The run's checkpoint files (relative paths), whether or not they still exist: see above."""
    work = _work(ev)
    ops = [o for o in ev.file_ops if o.path]
    renamers = {o.rank for o in ops if o.op == "rename"}
    published = {_rel(o.path, work) for o in ops if o.op in ("rename", "copy") and o.completed}
    in_place = {_rel(o.path, work) for o in ops if o.op in ("save", "copy") and o.rank not in renamers}
    return read | published | in_place


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


# -- what a checkpoint holds, by content -----------------------------------------------------------

def _find(obj: Any, pred, depth: int = 3) -> bool:
    if pred(obj):
        return True
    if depth == 0:
        return False
    if isinstance(obj, dict):
        return any(_find(v, pred, depth - 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_find(v, pred, depth - 1) for v in obj)
    return False


def _is_model(expected: dict[str, tuple] | None):
    def pred(d: Any) -> bool:
        if not isinstance(d, dict):
            return False
        shapes = {strip_wrappers(str(k)): tuple(v.shape) for k, v in d.items() if hasattr(v, "shape")}
        if expected is None:
            return bool(shapes)
        return all(shapes.get(k) == s for k, s in expected.items())
    return pred


def _is_optimizer(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("state"), dict) and isinstance(d.get("param_groups"), list)


def _is_scheduler(d: Any) -> bool:
    return isinstance(d, dict) and "last_epoch" in d and "base_lrs" in d


def missing_state(obj: Any, require: list[str], expected: dict[str, tuple] | None) -> list[str]:
    preds = {"model": _is_model(expected), "optimizer": _is_optimizer, "scheduler": _is_scheduler}
    what = {"model": "model parameters", "optimizer": "optimizer state", "scheduler": "LR scheduler state"}
    return [what[k] for k in require if not _find(obj, preds[k])]


def _summary(obj: Any) -> str:
    if isinstance(obj, dict):
        keys = [str(k) for k in obj][:6]
        return f"a dict of {len(obj)} entries: {', '.join(keys)}{', ...' if len(obj) > 6 else ''}"
    return f"a {type(obj).__name__}"


def _load(path: Path) -> tuple[Any, str | None]:
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True), None
    except Exception as e:  # a torn zip, a truncated pickle, or objects the safe loader refuses
        return None, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}"


# -- the parts of the verdict ----------------------------------------------------------------------

def _files(role: str, ev: RunEvidence, read: set[str], spec, expected, problems: Problems) -> dict[str, Any]:
    work = Path(_work(ev))
    out: dict[str, Any] = {}
    for rel in sorted(checkpoint_files(ev, read)):
        path = work / rel
        if not os.path.lexists(path) or os.path.isdir(path):
            continue
        why = why_not_readable(path, within=work, cap=CHECKPOINT_CAP)
        obj, err = (None, f"the file {why}") if why else _load(path)
        info: dict[str, Any] = {"loads": err is None, "read_by_a_restart": rel in read}
        if err:
            info["error"] = err
            problems.add("files", f"{rel} on disk at the end of the {role} run does not load ({err})")
        elif rel in read:
            lacks = missing_state(obj, spec.require, expected)
            if lacks:
                info["lacks"] = lacks
                problems.add("files", f"{rel}, a file a restart loads, holds no {' and no '.join(lacks)} "
                             f"(it holds {_summary(obj)})")
        out[rel] = info
    return out


def _writers(role: str, ev: RunEvidence, problems: Problems) -> dict[str, list[int]]:
    work = _work(ev)
    shared: dict[str, list[int]] = {}
    first_seen = None
    for path, st in sorted(ev.file_history.items()):
        if len(st.writers) < 2:
            continue
        rel = _rel(path, work)
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
    """Writes straight into a file a restart reads, and writes into a checkpoint file that never
    finished (whether or not anything read it afterwards)."""
    work = _work(ev)
    ckpts = checkpoint_files(ev, read)
    found = []
    writes = [o for o in ev.file_ops if o.op in ("save", "copy") and o.path]
    torn = [o for o in writes if o.t_end is None and _rel(o.path, work) in ckpts]
    direct = [o for o in writes if o.t_end is not None and _rel(o.path, work) in read]
    for o in torn + direct[:1]:
        found.append({"path": _rel(o.path, work), "rank": o.rank, "step": o.step, "attempt": o.attempt,
                      "op": o.op, "finished": o.t_end is not None})
    if torn:
        o = torn[0]
        loaded = any(lo.path == o.path and lo.attempt > o.attempt for lo in ev.file_loads)
        problems.add("torn", f"in the {role} run rank {o.rank} was killed half-way through a {_call(o)} "
                     f"straight into {_rel(o.path, work)} (step {o.step})"
                     + (", and the restarted job then loaded that file" if loaded else ""))
    if direct:
        o = direct[0]
        problems.add("in_place", f"{_call(o)} wrote straight into {_rel(o.path, work)}, a file a restart loads "
                     f"(rank {o.rank} at step {o.step}, {role} run)")
    return found


def _call(o: FileOp) -> str:
    return {"save": "torch.save", "copy": "file copy"}.get(o.op, o.op)


def _restart(role: str, ev: RunEvidence, read: set[str], problems: Problems) -> dict[str, Any]:
    how = RESTARTS.get(role, "killed")
    faults = (ev.run.get("config") or {}).get("faults") or []
    info: dict[str, Any] = {"status": ev.status, "faults": faults}
    attempts = max((o.attempts for o in ev.ranks.values()), default=0)
    info["attempts"] = attempts
    if attempts < 2:
        if faults and faults[0].get("when") == "save":
            problems.add("restart", f"no rank began a checkpoint write (torch.save to a file) at or after step "
                         f"{faults[0]['step']} in the {role} run, so the job was never killed during one")
        else:
            f = faults[0] if faults else {"rank": "?", "step": "?"}
            problems.add("restart", f"in the {role} run rank {f['rank']} was to be killed after step {f['step']}, "
                         "but the job never restarted (it made fewer steps?)")
        return info
    if ev.status != "ok":
        fail = ev.run.get("failure") or {}
        err = (fail.get("error") or "").strip().splitlines()
        obs = ev.ranks.get(fail.get("rank"))
        where = f" at {obs.last_location}" if obs is not None and obs.last_location else ""
        why = f": rank {fail.get('rank')} raised {err[-1][:200]}{where}" if err else ""
        problems.add("restart", f"the job {how} did not complete after its restart (status {ev.status}){why}")
        return info
    # The newest checkpoint complete on disk when the restart began.
    t_restart = min((r["t"] for rank in ev.ranks for r in ev.events(rank)
                     if r.get("attempt", 0) >= 1 and "t" in r), default=float("inf"))
    work = _work(ev)
    ckpts = checkpoint_files(ev, read)
    newest: tuple[int, str] | None = None
    for path, st in ev.file_history.items():
        if _rel(path, work) not in ckpts:
            continue
        for t, made in st.versions:
            if made.attempt == 0 and t < t_restart and (newest is None or made.step > newest[0]):
                newest = (made.step, _rel(path, work))
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
    roles = [Role.MAIN, Role.RESUME] + ([Role.RESUME_SAVE] if spec.save_kill_step else [])
    runs: dict[str, RunEvidence] = {}
    for role in roles:
        ev = need(ctx, name, role, ok_only=False)
        if isinstance(ev, CheckResult):
            return ev
        runs[role] = ev
    ref = ctx.runs.get("reference")
    base = next((p for p in (runs["main"].params(0), ref.params(0) if ref else None) if p), None)
    expected = {k: tuple(v.shape) for k, v in base.items()} if base else None
    read = _read_paths(runs)
    problems = Problems()
    evidence: dict[str, Any] = {"read_by_restarts": sorted(read), "require": list(spec.require), "runs": {}}
    for role, ev in runs.items():
        e = evidence["runs"][role] = {}
        if role in RESTARTS:
            e["restart"] = _restart(role, ev, read, problems)
        e["shared_files"] = _writers(role, ev, problems)
        e["written_in_place"] = _in_place(role, ev, read, problems)
        e["files"] = _files(role, ev, read, spec, expected, problems)
    if problems:
        evidence["problems"] = problems.all()
        return CheckResult(name, False, problems.message(), evidence)
    n = sum(len(e["files"]) for e in evidence["runs"].values())
    restarts = ", ".join(r for r in runs if r in RESTARTS)
    return CheckResult(name, True, f"{n} checkpoint files over {len(runs)} runs load, each written by one rank "
                       f"and never in place where a restart reads; the restarts ({restarts}) began from the "
                       "newest complete checkpoint", evidence)


CHECK = Check("checkpoints_sound", Spec, judge, runs=runs)
