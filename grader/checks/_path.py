"""Following a path of parameter fingerprints step by step: shared by ``trajectory`` (the path of
the reference run) and ``resume_exact`` (the path of the submission's own uninterrupted run).
Fingerprints come from the bootstrap (``grader/evidence/fingerprints.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from grader.evidence import RunEvidence
from grader.evidence.fingerprints import step_fingerprints, unobserved_change
from grader.roles import FINGERPRINTS, RESTARTED, Role, RunRequest

if TYPE_CHECKING:
    from grader.checks.base import CheckResult, Context
    from grader.manifest import Manifest


class PathSpec(Protocol):
    """What the path checks (trajectory, resume_exact) share in their Spec."""

    @property
    def rtol(self) -> float: ...
    @property
    def atol(self) -> float: ...
    @property
    def checkpoint_interval(self) -> int | None: ...


def fingerprinted_main(spec: PathSpec, manifest: Manifest) -> list[RunRequest]:
    """The main run, recorded with per-step parameter fingerprints (a check's ``runs``)."""
    return [RunRequest(Role.MAIN, manifest.world_size, env=FINGERPRINTS)]


def close(a: float, b: float, spec: PathSpec) -> bool:
    return abs(a - b) <= spec.atol + spec.rtol * abs(b)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def path_of(ev: RunEvidence) -> dict[int, float]:
    """step -> fingerprint of a run's rank 0 in its first attempt (step 0: the initial parameters)."""
    return dict(step_fingerprints(ev, 0).get(0, []))


def _follow(path: list[tuple[int, float]], ref: dict[int, float], offset: int, spec: PathSpec) -> dict[str, Any] | None:
    """The first step of ``path`` (steps counted from ``offset`` on the reference's path) that
    leaves the reference's path, or None."""
    worst = 0.0
    for step, fp in path:
        want = ref.get(step + offset)
        if want is None:
            return {"step": step + offset, "beyond": True}
        worst = max(worst, _rel(fp, want))
        if not close(fp, want, spec):
            return {"step": step + offset, "relative_difference": _rel(fp, want)}
    return None if path else {"step": offset, "empty": True}


def _worst(path: list[tuple[int, float]], ref: dict[int, float], offset: int) -> float:
    return max((_rel(fp, ref[s + offset]) for s, fp in path if s + offset in ref), default=0.0)


def _resume_point(start: float, ref: dict[int, float], spec: PathSpec) -> int | None:
    """The reference step whose parameters a restarted attempt began from (None: none of them)."""
    found = [s for s, fp in ref.items() if close(start, fp, spec)]
    return max(found) if found else None


def judge_run(role: str, ev: RunEvidence, ref: dict[int, float], spec: PathSpec, info: dict[int, dict[str, Any]],
              against: str = "the reference run") -> str | None:
    """What is wrong with one run's path against ``ref`` (``against`` names whose path it is), or
    None. ``spec`` has ``rtol``, ``atol`` and ``checkpoint_interval``."""
    for r in sorted(ev.ranks):
        paths = step_fingerprints(ev, r)
        if not paths:
            return f"rank {r} of the {role} run left no parameter fingerprints (it made no optimizer step)"
        change = unobserved_change(ev, r)
        if change:
            info.setdefault(r, {})["unobserved_change"] = change
            return _unobserved(role, r, change)
        first = paths.get(0, [])
        miss = _follow(first, ref, 0, spec)
        info.setdefault(r, {})["steps_compared"] = len(first)
        info[r]["largest_relative_difference"] = _worst(first, ref, 0)
        if miss and not (role in RESTARTED and miss.get("beyond")):
            return _left(role, r, miss, against)
        if role not in RESTARTED:
            continue
        unkilled = not_killed(ev, role)
        if unkilled:
            return unkilled
        if 1 not in paths:
            return f"rank {r} of the {role} run was killed, but no restarted attempt of it made an optimizer step"
        killed_after = max((s for s, _ in first), default=0)
        start_fp = paths[1][0][1] if paths[1] and paths[1][0][0] == 0 else None
        if start_fp is None:
            return f"rank {r}'s restart in the {role} run left no fingerprint of where it began"
        c = _resume_point(start_fp, ref, spec)
        info[r].update(killed_after_step=killed_after, resumed_from_step=c)
        if c is None:
            return (f"after the restart in the {role} run, rank {r} began from parameters {against} never "
                    "had (not the initial ones, nor those after any step)")
        lost = killed_after - c
        # A kill during a checkpoint write loses that checkpoint too: what counts is the state the
        # torn write was saving, which an asynchronous writer began steps before the kill.
        torn = _torn_step(ev)
        in_flight = max(0, killed_after - torn) if torn is not None else 0
        info[r]["torn_write_step"] = torn
        if spec.checkpoint_interval is not None and lost > spec.checkpoint_interval + in_flight:
            began = "the initial parameters" if c == 0 else f"the parameters of step {c}"
            flight = (f", and the {in_flight} steps made while the torn write of step {torn}'s state was in flight"
                      if in_flight else "")
            return (f"after the restart in the {role} run, rank {r} began from {began}: {lost} steps of work were "
                    f"lost (the kill came after step {killed_after}), where a job that checkpoints every "
                    f"{spec.checkpoint_interval} steps loses at most {spec.checkpoint_interval}{flight}")
        resumed = [(s, fp) for s, fp in paths[1] if s > 0]
        miss = _follow(resumed, ref, c, spec)
        info[r]["restart_steps_compared"] = len(resumed)
        if miss:
            return _left(f"{role} run's restart", r, miss, against)
    return None


def not_killed(ev: RunEvidence, role: str) -> str | None:
    """Why a restarted run's restart is not the planned one: the parent killed no rank (its record
    ``faults_injected``, absent from runs made before the parent performed the kills), so whatever
    restarted the job was the script's own doing."""
    kills = ev.run.get("faults_injected")
    # a kill the parent recorded with nothing killed (the rank ran past its point and ended between
    # two polls: harness.injector.settle) is no kill
    if kills is None or any(isinstance(k, dict) and k.get("killed", 1) for k in kills):
        return None
    planned = (ev.run.get("config") or {}).get("faults") or []
    where = ", ".join(f"rank {f.get('rank')} {'during the first checkpoint write at or after' if f.get('when') == 'save' else 'after'} "
                      f"step {f.get('step')}" for f in planned[:2])
    return (f"the {role} run was to be killed ({where}), but the parent never killed a rank: no rank reached the "
            "planned point, so any restart was the script's own")


def _torn_step(ev: RunEvidence) -> int | None:
    """The step of the earliest write a kill tore in the run's first attempt (any rank), if any."""
    steps = [o.step for o in ev.file_ops if o.attempt == 0 and o.t_end is None and o.op != "rename"]
    return min(steps) if steps else None


def _unobserved(role: str, rank: int, c: dict[str, Any]) -> str:
    attempt = f" (attempt {c['attempt']})" if c["attempt"] else ""
    if c.get("exit"):
        return (f"rank {rank}'s final parameters in the {role} run{attempt} are not those its last optimizer step "
                f"(step {c['after_step']}) left: they changed after it, outside any step the harness observed "
                f"(fingerprint moved by {c['relative_difference']:.2e} of its value)")
    return (f"rank {rank}'s parameters in the {role} run{attempt} changed between optimizer steps {c['after_step']} "
            f"and {c['step']}, outside any step the harness observed (fingerprint moved by "
            f"{c['relative_difference']:.2e} of its value)")


def _left(where: str, rank: int, miss: dict[str, Any], against: str) -> str:
    if miss.get("empty"):
        return f"rank {rank} of the {where} made no optimizer step"
    if miss.get("beyond"):
        return f"rank {rank} of the {where} went on past {against}'s last step ({miss['step'] - 1})"
    s = miss["step"]
    what = f"began from other initial parameters than {against}" if s == 0 else \
        f"left {against}'s path at step {s}"
    return f"rank {rank} of the {where} {what} (its parameters' fingerprint differs by {miss['relative_difference']:.2e} " \
           "of that run's)"




def judge_role(ctx: Context, name: str, role: str, main: RunEvidence, ref: dict[int, float], spec: PathSpec,
               evidence: dict[str, Any], against: str = "the reference run") -> RunEvidence | CheckResult:
    """One run of a grading followed along ``ref``: the run's evidence when its path is sound, else
    the CheckResult that says why not (a run missing, recorded without fingerprints, off the path)."""
    from grader.checks.base import CheckResult, need

    ev = main if role == "main" else need(ctx, name, role, ok_only=False)
    if isinstance(ev, CheckResult):
        return ev
    if not any(step_fingerprints(ev, r) for r in ev.ranks):
        return CheckResult(name, False, f"the {role} run was not recorded with parameter fingerprints",
                           evidence, environment=True)
    info: dict[int, dict[str, Any]] = {}  # by rank
    evidence["runs"][str(role)] = info
    problem = judge_run(str(role), ev, ref, spec, info, against)
    return CheckResult(name, False, problem, evidence) if problem else ev
