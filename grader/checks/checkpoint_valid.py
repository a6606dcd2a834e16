"""checkpoint_valid: a checkpoint the script writes (a path relative to its working dir) loads as
the script's own resume would load it, holds the final parameters and the state the brief asks for
(recognised by content, under whatever keys: ``grader.evidence.contents``), was written by one rank
(from the save trace), and carries the values the reference run's checkpoint carries, under
whatever key: a fix may not pass by deleting the work a collective protected."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need
from grader.evidence import contents
from grader.evidence.checkpoint import final_checkpoint
from grader.evidence.layouts import LayoutError, load_checkpoint
from grader.evidence.params import compare


class Spec(CheckSpec):
    name: Literal["checkpoint_valid"]
    path: str
    # state the checkpoint must hold besides the model, recognised by content under any key
    # (grader.evidence.contents): optimizer, scheduler, scaler, step
    require: list[Literal["optimizer", "scheduler", "scaler", "step"]] = []
    # numbers the reference run's checkpoint holds (under these keys of the reference's) that the
    # submission's checkpoint must also hold, under whatever key: what a collective in the
    # checkpoint path computes (a validation loss averaged over ranks) cannot be dropped unnoticed
    reference_values: list[str] = []
    # the optimizer's per-parameter state (Adam's moments, SGD's momentum) within this relative
    # difference (per tensor, of its norm) of the reference run's checkpoint's, matched by
    # structure: what the gradients were, where the parameters cannot tell (AdamW is nearly blind
    # to the gradients' scale, so a sum where an average was meant ends at the same parameters)
    optimizer_against_reference: float | None = Field(None, gt=0)
    # from the save trace: one rank wrote it (every rank saving one path is a race, apex#629)
    single_writer: bool = True
    # The checkpoint against the run's own final parameters, and each reference value against the
    # reference run's. Measured over the validity suites of 2026-11-29 (amp-no-scaler,
    # collective-deadlock, incident-multi, memory-leak: every rewrite and mutation): every checkpoint
    # that held the final state held it exactly (0.0), every rewrite's reference values exactly; the
    # nearest failing value (incident-multi's test loss computed on rank 0 only) 1.2e-3, 123x rtol.
    rtol: float = Field(1e-5, ge=0)
    atol: float = Field(1e-6, ge=0)


# A value matches the reference's within this: the exercises' values are means over the same
# samples, reduced in another order at most. Measured (the variants of collective-deadlock and
# incident-multi, graded then re-judged with `closest_relative_difference` in the evidence): valid
# fixes 0.0 to 9.8e-8 from the reference's figure; the nearest real fault 9.1e-4 (incident-multi's
# test_loss after a missed sampler order), then 2.3e-3 and 5.1e-3 (collective-deadlock's validation
# loss on one rank's shard). 1e-4 sits 1000x above the one and 9x below the other.
VALUE_RTOL, VALUE_ATOL = 1e-4, 1e-6


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "checkpoint_valid"
    ev = need(ctx, name, "main", ok_only=False)
    if isinstance(ev, CheckResult):
        return ev
    found = final_checkpoint(ev, spec.path, spec.require, spec.single_writer, spec.rtol, spec.atol)
    evidence, ckpt = found.evidence, found.content
    if not found.ok:
        return CheckResult(name, False, found.message, evidence)
    theirs = None
    if spec.reference_values or spec.optimizer_against_reference:
        theirs = _reference_checkpoint(spec, ctx, evidence)
        if isinstance(theirs, CheckResult):
            return theirs
    if spec.reference_values:
        compared = evidence.setdefault("reference_comparison", {})
        for k in spec.reference_values:
            want = contents.numbers({k: theirs.get(k)} if isinstance(theirs, dict) else {}, 1).get(k)
            if want is None:
                return CheckResult(name, False, f"the reference run's checkpoint holds no number under {k!r}",
                                   evidence, environment=True)
            # never the reference's figure in a message: it could be copied into a checkpoint that
            # skipped the work; the candidate's own numbers are theirs to see
            at = contents.find_value(ckpt, want, VALUE_RTOL, VALUE_ATOL)
            near = contents.closest(ckpt, want)
            compared[k] = {"found_at": at, "closest_relative_difference": None if near is None else round(near[1], 9)}
            if at is None:
                held = contents.numbers(ckpt)
                listing = ", ".join(f"{p} = {v:.6g}" for p, v in list(held.items())[:6]) or "no numbers"
                return CheckResult(name, False, f"the checkpoint holds no value equal to the reference run's {k} "
                                   f"(within {VALUE_RTOL:g} relative), under any key: it holds {listing}", evidence)
    if spec.optimizer_against_reference:
        problem = _optimizer_against_reference(spec, theirs, ckpt, evidence)
        if problem is not None:
            return problem
    said = [*spec.reference_values, *(["the optimizer's state"] if spec.optimizer_against_reference else [])]
    what = " and " + ", ".join(said) + " as in the reference run" if said else ""
    return CheckResult(name, True, f"the checkpoint at {spec.path} loads and holds the final parameters{what}",
                       evidence)


def _reference_checkpoint(spec: Spec, ctx: Context, evidence: dict[str, Any]) -> Any:
    """The reference run's checkpoint at the same path, loaded once, or why it cannot be judged."""
    ref = need(ctx, "checkpoint_valid", "reference")
    if isinstance(ref, CheckResult):
        return ref
    try:
        return load_checkpoint(Path(ref.run_dir) / "work" / spec.path, Path(ref.run_dir) / "work")
    except LayoutError as e:
        return CheckResult("checkpoint_valid", False, f"the reference run's checkpoint does not load: {e}", evidence,
                           environment=True)


def _optimizer_against_reference(spec: Spec, theirs: Any, ckpt: Any, evidence: dict[str, Any]) -> CheckResult | None:
    name = "checkpoint_valid"
    want, mine = contents.optimizer_moments(theirs), contents.optimizer_moments(ckpt)
    if not want:
        return CheckResult(name, False, "the reference run's checkpoint holds no optimizer state", evidence,
                           environment=True)
    if mine is None:
        return CheckResult(name, False, f"the checkpoint at {spec.path} holds no optimizer state", evidence)
    compared = evidence.setdefault("optimizer_comparison", {})
    for k, moments in want.items():
        if k not in mine:
            return CheckResult(name, False, f"the checkpoint's optimizer state holds no {k!r} (the optimizer the "
                               f"brief names keeps it per parameter; it holds {', '.join(mine) or 'none'})", evidence)
        cmp = compare(mine[k], moments, 0.0, 0.0, max_rel=spec.optimizer_against_reference)
        compared[k] = {f: cmp.get(f) for f in ("close", "max_tensor_rel_diff", "worst_rel_param", "matched_by", "problem")}
        if not cmp["close"]:
            detail = (f"{cmp['max_tensor_rel_diff']:.1%} of the tensor's norm (parameter {cmp['worst_rel_param']})"
                      if cmp.get("same_structure") else cmp.get("problem", "the states differ in structure"))
            ratio = _norm_ratio(mine[k], moments)
            return CheckResult(name, False, f"the optimizer's {k} in the checkpoint differs from a correct run's by "
                               f"{detail}; its norm is {ratio:.3g}x a correct run's (allowed: "
                               f"{spec.optimizer_against_reference:.0%} per tensor)", evidence)
    return None


def _norm_ratio(mine: dict[str, Any], theirs: dict[str, Any]) -> float:
    a = sum(float(t.double().norm()) for t in mine.values())
    b = sum(float(t.double().norm()) for t in theirs.values())
    return a / b if b else float("inf")


CHECK = Check("checkpoint_valid", Spec, judge, needs_reference=lambda spec: bool(spec.reference_values
                                                                                 or spec.optimizer_against_reference),
              property="the checkpoint loads as the script's resume loads it and holds the final model and the state the brief names")
