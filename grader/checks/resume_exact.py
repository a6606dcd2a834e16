"""resume_exact: a run that is killed and restarted ends where the submission's own uninterrupted
run ends, having lost at most one checkpoint interval of work, and after the restart it takes the
same steps the uninterrupted run took from there.

The property a resume fix is asked for is exactness against the job's own counterfactual, not
against the reference solution: a candidate may shuffle with their own generator, skip the
consumed part of an epoch their own way, or lay out their checkpoint as they like, and the runs
that were never interrupted (``main``) and that were (``resume``, ``resume_save``, declared by the
checks that kill: ``sample_partition``, ``checkpoints_sound``) are the same script, so they must
agree. Evidence: per-step parameter fingerprints (``TRAINWRECK_FINGERPRINT=1``) of both, each
rank's final parameters, and where each restart began (the fingerprint before its first step).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from grader.checks._path import fingerprinted_main, judge_role, path_of
from grader.checks.base import Check, CheckResult, CheckSpec, Context, agreed_params, need_trained
from grader.evidence.params import compare
from grader.roles import RESTARTED, Role

OWN = "its own uninterrupted run"


class Spec(CheckSpec):
    name: Literal["resume_exact"]
    # Fingerprints of two runs of one deterministic script agree bit for bit; trajectory's tolerance
    # (5e-6 relative) is kept for a script whose reductions sum in another order after a restart.
    # Measured over the validity suite of checkpoint-resume (2026-11-29): every rewrite's restarts
    # bit for bit (0.0); the nearest failing mutant that resumes at all 1.05e-2, 2,100x rtol.
    rtol: float = Field(5e-6, ge=0)
    atol: float = Field(1e-6, ge=0)
    # the job checkpoints every this many steps: a restart may lose at most this much work
    checkpoint_interval: int | None = Field(None, gt=0)
    # final parameters: the restarted run against the uninterrupted one
    params_rtol: float = Field(1e-5, ge=0)
    params_atol: float = Field(1e-6, ge=0)


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "resume_exact"
    main = need_trained(ctx, name)
    if isinstance(main, CheckResult):
        return main
    restarted = [r for r in RESTARTED if r in ctx.runs]
    if not restarted:
        return CheckResult(name, False, "no run of the grading was killed and restarted (a check that kills "
                           "one, such as sample_partition with resume = true, must be in the manifest)",
                           environment=True)
    own = path_of(main)
    if len(own) < 2:
        return CheckResult(name, False, "the main run was not recorded with parameter fingerprints",
                           environment=True)
    final = agreed_params(main, name)
    if isinstance(final, CheckResult):
        return final
    evidence: dict[str, Any] = {"rtol": spec.rtol, "atol": spec.atol, "own_steps": max(own),
                                "checkpoint_interval": spec.checkpoint_interval, "runs": {}}
    for role in [Role.MAIN, *restarted]:
        ev = judge_role(ctx, name, role, main, own, spec, evidence, against=OWN)
        if isinstance(ev, CheckResult):
            return ev
        info = evidence["runs"][str(role)]
        if role == Role.MAIN:
            continue
        if ev.status != "ok":
            return CheckResult(name, False, f"{ev.describe()} did not complete after its restart (status "
                               f"{ev.status})", evidence)
        after = agreed_params(ev, name)
        if isinstance(after, CheckResult):
            return after
        cmp = info["final"] = compare(after, final, spec.params_rtol, spec.params_atol)
        if not cmp["close"]:
            detail = (f"largest difference {cmp['max_abs_diff']:.3g} in {cmp['worst_param']}"
                      if cmp.get("same_structure") else cmp.get("problem", "the parameter sets differ"))
            how = "during a checkpoint write" if role == Role.RESUME_SAVE else "mid-run"
            return CheckResult(name, False, f"the run that was killed {how} and restarted ends at different "
                               f"parameters from {OWN}: {detail}", evidence)
    kinds = ", ".join(str(r) for r in restarted)
    return CheckResult(name, True, f"the restarted runs ({kinds}) resumed within the checkpoint interval and "
                       f"took the same steps as {OWN}, ending at its parameters", evidence)


CHECK = Check("resume_exact", Spec, judge, runs=fingerprinted_main,
              property="a killed and restarted run continues exactly as the submission's own uninterrupted run, losing at most one checkpoint interval")
