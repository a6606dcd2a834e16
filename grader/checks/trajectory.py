"""trajectory: the submission's parameters follow the reference run's, step by step.

Where an exercise is deterministic, the strongest evidence is the path training took, not only
where it ended: the bootstrap fingerprints the parameters before the first step and after every
step (``TRAINWRECK_FINGERPRINT=1``, ``grader/evidence/fingerprints.py``), here and in the reference
run. A valid fix in another style follows the same path (float rounding apart); an end state
copied in, a restart from scratch, or lost work leaves it, and the evidence names the first step
that did. Every change of the parameters must happen inside an observed optimizer step: the
bootstrap also fingerprints them when each step begins (``fp_pre``) and at exit (``fp_exit``), so
weights set by hand between steps, or an end state put in place after the last step, fail with
the steps named (``grader.evidence.fingerprints.unobserved_change``; before the first step of an
attempt anything may happen, such as loading a checkpoint). Runs killed and restarted are judged too: the restart must begin where the reference
was at some step no more than ``checkpoint_interval`` steps before the kill (the newest
checkpoint the job was meant to write), and go on along the reference's path from there, however
it got there (a resume that fast-forwards its sampler by reading and discarding batches passes).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need, need_trained
from grader.evidence import RunEvidence
from grader.evidence.fingerprints import step_fingerprints, unobserved_change
from grader.roles import FINGERPRINTS, RESTARTED, Role, RunRequest


class Spec(CheckSpec):
    name: Literal["trajectory"]
    # |fp - fp_ref| <= atol + rtol * |fp_ref| at every step; fingerprints are float64 sums of a few
    # elements of every parameter. Measured (tests/variants/README.md, "the trajectory's tolerance"):
    # the reference solution graded again and every valid variant graded follow the reference's path
    # bit for bit (0.0); the one path that only sums in another order, comm-bound's all-reduce per
    # micro-batch, drifts to 1.0e-6 by its last step; the smallest divergence of a real fault is
    # 2.7e-5 (incident-multi's sampler at step 33). 5e-6 sits 5x above the one and 5x below the other.
    rtol: float = Field(5e-6, ge=0)
    atol: float = Field(1e-6, ge=0)
    # the job checkpoints every this many steps: a restarted run may lose at most this much work
    checkpoint_interval: int | None = Field(None, gt=0)


def runs(spec: Spec, manifest) -> list[RunRequest]:
    return [RunRequest(Role.MAIN, manifest.world_size, env=FINGERPRINTS)]


def _close(a: float, b: float, spec: Spec) -> bool:
    return abs(a - b) <= spec.atol + spec.rtol * abs(b)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def _reference_path(ref: RunEvidence) -> dict[int, float]:
    """step -> fingerprint of the reference run's rank 0 (step 0: the initial parameters)."""
    return dict(step_fingerprints(ref, 0).get(0, []))


def _follow(path: list[tuple[int, float]], ref: dict[int, float], offset: int, spec: Spec) -> dict[str, Any] | None:
    """The first step of ``path`` (steps counted from ``offset`` on the reference's path) that
    leaves the reference's path, or None."""
    worst = 0.0
    for step, fp in path:
        want = ref.get(step + offset)
        if want is None:
            return {"step": step + offset, "beyond": True}
        worst = max(worst, _rel(fp, want))
        if not _close(fp, want, spec):
            return {"step": step + offset, "relative_difference": _rel(fp, want)}
    return None if path else {"step": offset, "empty": True}


def _worst(path: list[tuple[int, float]], ref: dict[int, float], offset: int) -> float:
    return max((_rel(fp, ref[s + offset]) for s, fp in path if s + offset in ref), default=0.0)


def _resume_point(start: float, ref: dict[int, float], spec: Spec) -> int | None:
    """The reference step whose parameters a restarted attempt began from (None: none of them)."""
    found = [s for s, fp in ref.items() if _close(start, fp, spec)]
    return max(found) if found else None


def _judge_run(role: str, ev: RunEvidence, ref: dict[int, float], spec: Spec, info: dict[str, Any]) -> str | None:
    """What is wrong with one run's path, or None."""
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
            return _left(role, r, miss)
        if role not in RESTARTED:
            continue
        if 1 not in paths:
            return f"rank {r} of the {role} run was killed, but no restarted attempt of it made an optimizer step"
        killed_after = max((s for s, _ in first), default=0)
        start_fp = paths[1][0][1] if paths[1] and paths[1][0][0] == 0 else None
        if start_fp is None:
            return f"rank {r}'s restart in the {role} run left no fingerprint of where it began"
        c = _resume_point(start_fp, ref, spec)
        info[r].update(killed_after_step=killed_after, resumed_from_step=c)
        if c is None:
            return (f"after the restart in the {role} run, rank {r} began from parameters the reference run never "
                    "had (not the initial ones, nor those after any step)")
        lost = killed_after - c
        if spec.checkpoint_interval is not None and lost > spec.checkpoint_interval:
            began = "the initial parameters" if c == 0 else f"the parameters of step {c}"
            return (f"after the restart in the {role} run, rank {r} began from {began}: {lost} steps of work were "
                    f"lost (the kill came after step {killed_after}), where a job that checkpoints every "
                    f"{spec.checkpoint_interval} steps loses at most {spec.checkpoint_interval}")
        resumed = [(s, fp) for s, fp in paths[1] if s > 0]
        miss = _follow(resumed, ref, c, spec)
        info[r]["restart_steps_compared"] = len(resumed)
        if miss:
            return _left(f"{role} run's restart", r, miss)
    return None


def _unobserved(role: str, rank: int, c: dict[str, Any]) -> str:
    attempt = f" (attempt {c['attempt']})" if c["attempt"] else ""
    if c.get("exit"):
        return (f"rank {rank}'s final parameters in the {role} run{attempt} are not those its last optimizer step "
                f"(step {c['after_step']}) left: they changed after it, outside any step the harness observed "
                f"(fingerprint moved by {c['relative_difference']:.2e} of its value)")
    return (f"rank {rank}'s parameters in the {role} run{attempt} changed between optimizer steps {c['after_step']} "
            f"and {c['step']}, outside any step the harness observed (fingerprint moved by "
            f"{c['relative_difference']:.2e} of its value)")


def _left(where: str, rank: int, miss: dict[str, Any]) -> str:
    if miss.get("empty"):
        return f"rank {rank} of the {where} made no optimizer step"
    if miss.get("beyond"):
        return f"rank {rank} of the {where} went on past the reference run's last step ({miss['step'] - 1})"
    s = miss["step"]
    what = "began from other initial parameters than the reference run" if s == 0 else \
        f"left the reference run's path at step {s}"
    return f"rank {rank} of the {where} {what} (its parameters' fingerprint differs by {miss['relative_difference']:.2e} " \
           "of the reference's)"


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "trajectory"
    main = need_trained(ctx, name)
    if isinstance(main, CheckResult):
        return main
    ref_ev = need(ctx, name, Role.REFERENCE)
    if isinstance(ref_ev, CheckResult):
        return ref_ev
    ref = _reference_path(ref_ev)
    if len(ref) < 2:
        return CheckResult(name, False, "the reference run was not recorded with parameter fingerprints",
                           environment=True)
    evidence: dict[str, Any] = {"rtol": spec.rtol, "atol": spec.atol, "reference_steps": max(ref),
                                "checkpoint_interval": spec.checkpoint_interval, "runs": {}}
    judged = [Role.MAIN] + [r for r in RESTARTED if r in ctx.runs]
    for role in judged:
        ev = ctx.runs[role] if role != Role.MAIN else main
        if role != Role.MAIN:
            ev = need(ctx, name, role, ok_only=False)
            if isinstance(ev, CheckResult):
                return ev
        if not any(step_fingerprints(ev, r) for r in ev.ranks):
            return CheckResult(name, False, f"the {role} run was not recorded with parameter fingerprints",
                               evidence, environment=True)
        info = evidence["runs"][str(role)] = {}
        problem = _judge_run(str(role), ev, ref, spec, info)
        if problem:
            return CheckResult(name, False, problem, evidence)
    worst = max((v.get("largest_relative_difference", 0.0) for run in evidence["runs"].values()
                 for v in run.values()), default=0.0)
    restarts = [str(r) for r in judged if r != Role.MAIN]
    extra = f", and the restarted runs ({', '.join(restarts)}) went on along it" if restarts else ""
    return CheckResult(name, True, f"the parameters followed the reference run's path at every step "
                       f"({max(ref)} steps; largest relative difference {worst:.1e}){extra}", evidence)


CHECK = Check("trajectory", Spec, judge, runs=runs, needs_reference=lambda spec: True)
