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

from grader.checks._path import fingerprinted_main, judge_role, path_of
from grader.checks.base import Check, CheckResult, CheckSpec, Context, need, need_trained
from grader.roles import RESTARTED, Role


class Spec(CheckSpec):
    name: Literal["trajectory"]
    # |fp - fp_ref| <= atol + rtol * |fp_ref| at every step; fingerprints are float64 sums of a few
    # elements of every parameter. Measured (tests/variants/README.md, "the trajectory's tolerance"):
    # the reference solution graded again and every valid variant graded follow the reference's path
    # bit for bit (0.0); the one path that only sums in another order, comm-bound's all-reduce per
    # micro-batch, drifts to 1.0e-6 by its last step; the smallest divergence of a real fault is
    # 2.7e-5 (incident-multi's sampler at step 33). 5e-6 sits 5x above the one and 5x below the other.
    # The validity suites of 2026-11-29 (every rewrite of every reference fix): at most 5.4e-7
    # (lr-scaling's micro-batches, 9x under); the nearest failing mutant 5.3e-5 (slow-input-pipeline).
    rtol: float = Field(5e-6, ge=0)
    atol: float = Field(1e-6, ge=0)
    # the job checkpoints every this many steps: a restarted run may lose at most this much work
    checkpoint_interval: int | None = Field(None, gt=0)


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "trajectory"
    main = need_trained(ctx, name)
    if isinstance(main, CheckResult):
        return main
    ref_ev = need(ctx, name, Role.REFERENCE)
    if isinstance(ref_ev, CheckResult):
        return ref_ev
    ref = path_of(ref_ev)
    if len(ref) < 2:
        return CheckResult(name, False, "the reference run was not recorded with parameter fingerprints",
                           environment=True)
    evidence: dict[str, Any] = {"rtol": spec.rtol, "atol": spec.atol, "reference_steps": max(ref),
                                "checkpoint_interval": spec.checkpoint_interval, "runs": {}}
    judged = [Role.MAIN] + [r for r in RESTARTED if r in ctx.runs]
    for role in judged:
        ev = judge_role(ctx, name, role, main, ref, spec, evidence)
        if isinstance(ev, CheckResult):
            return ev
    worst = max((v.get("largest_relative_difference", 0.0) for run in evidence["runs"].values()
                 for v in run.values()), default=0.0)
    restarts = [str(r) for r in judged if r != Role.MAIN]
    extra = f", and the restarted runs ({', '.join(restarts)}) went on along it" if restarts else ""
    return CheckResult(name, True, f"the parameters followed the reference run's path at every step "
                       f"({max(ref)} steps; largest relative difference {worst:.1e}){extra}", evidence)


CHECK = Check("trajectory", Spec, judge, runs=fingerprinted_main, needs_reference=lambda spec: True,
              property="the parameters follow a correct run's path step by step (the brief asks for the same training)")
