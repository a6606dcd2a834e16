"""matches_reference: the final parameters (saved by the rank bootstrap at exit, never by the
script) are within tolerance of the reference solution's run, identical across ranks; and every
run that was killed and restarted ends there too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, agreed_params, need, need_trained
from grader.evidence import harness_failed
from grader.evidence.params import compare
from grader.roles import RESTARTED, Role

if TYPE_CHECKING:
    from grader.evidence import RunEvidence


class Spec(CheckSpec):
    name: Literal["matches_reference"]
    rtol: float = Field(1e-4, ge=0)
    atol: float = Field(1e-5, ge=0)
    # per tensor, ||mine - reference|| / ||reference|| at most this, instead of rtol/atol element by
    # element: for a brief that lets the arithmetic's rounding change (comm-bound: gradients may
    # travel in fp16), where single elements move by more than the tensor as a whole does
    max_rel_diff: float | None = Field(None, gt=0)


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "matches_reference"
    ev, ref = need_trained(ctx, name), need(ctx, name, "reference")
    if isinstance(ev, CheckResult):
        return ev
    if isinstance(ref, CheckResult):
        return ref
    mine, theirs = agreed_params(ev, name), agreed_params(ref, name)
    if isinstance(mine, CheckResult):
        return mine
    if isinstance(theirs, CheckResult):
        theirs.environment = True
        return theirs
    # A run that was killed and resumed (between checkpoints: "resume"; during a checkpoint write:
    # "resume_save") must end where an uninterrupted one does.
    resumes: dict[str, Any] = {}
    for role in sorted(r for r in ctx.runs if r in RESTARTED):
        resumed = ctx.runs[role]
        if resumed.status != "ok" or harness_failed(resumed):
            continue
        after = agreed_params(resumed, name)
        if isinstance(after, CheckResult):
            return after
        rc = resumes[role] = compare(after, theirs, spec.rtol, spec.atol, max_rel=spec.max_rel_diff)
        if not rc["close"]:
            detail = (f"largest difference {rc['max_abs_diff']:.3g} in {rc['worst_param']}"
                      if rc.get("same_structure") else rc.get("problem", "the parameter sets differ"))
            how = "during a checkpoint write" if role == Role.RESUME_SAVE else "mid-run"
            return CheckResult(name, False, f"the run that was killed {how} and restarted ends at different "
                               f"parameters from the reference's uninterrupted run: {detail}", {role: rc})
    cmp = compare(mine, theirs, spec.rtol, spec.atol, max_rel=spec.max_rel_diff)
    cmp.update(rtol=spec.rtol, atol=spec.atol, **({"resumed_runs": resumes} if resumes else {}))
    if not cmp["same_structure"]:
        return CheckResult(name, False, "the model is not the reference's model: "
                           f"{cmp.get('problem') or 'a parameter differs in shape'}", cmp)
    if cmp.get("nonfinite_first"):
        return CheckResult(name, False, f"{cmp['nonfinite_first']} of the {cmp['elements']} final parameters are NaN "
                           f"or inf{_corrupted_when(ev)}", cmp)
    if cmp["max_abs_diff"] == 0:
        return CheckResult(name, True, "final parameters are identical to the reference run's", cmp)
    verdict = "match" if cmp["close"] else "differ from"
    if spec.max_rel_diff:
        msg = (f"final parameters {verdict} the reference run's: largest difference {cmp['max_tensor_rel_diff']:.3%} "
               f"of a tensor's norm (in {cmp['worst_rel_param']}); tolerance {spec.max_rel_diff:.2%}")
    else:
        msg = (f"final parameters {verdict} the reference run's: largest difference {cmp['max_abs_diff']:.3g} "
               f"({cmp['max_rel_diff']:.2%} of its norm) in {cmp['worst_param']}; tolerance rtol={spec.rtol:g}, "
               f"atol={spec.atol:g}")
    return CheckResult(name, cmp["close"], msg, cmp)


def _corrupted_when(ev: RunEvidence) -> str:
    """When the loss first went non-finite on rank 0, and the overflow the grading injected before it."""
    steps = [e for e in ev.events(0) if e.get("kind") == "step"]
    bad = next((e for e in steps if isinstance(e.get("loss"), str)), None)
    inj = next((e for e in ev.events(0) if e.get("kind") == "overflow" and "param" in e), None)
    out = f" (rank 0's loss is {bad['loss']} from optimizer step {bad['step']} on)" if bad else ""
    if inj:
        out += (f"; the grading made the gradients of optimizer step {inj['step']} overflow (inf in {inj['param']} "
                "on every rank after backward, as an fp16 overflow leaves them after the all-reduce), and the run "
                "applied them")
    return out


CHECK = Check("matches_reference", Spec, judge, needs_reference=lambda spec: True,
              property="the final parameters are those a correct run of the exercise's script reaches (the brief asks for the same training)")
