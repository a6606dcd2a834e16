"""checkpoint_valid: a checkpoint the script writes (a path relative to its working dir) loads as
the script's own resume would load it, holds the final parameters and the state the brief asks for
(recognised by content, under whatever keys: ``grader.evidence.contents``), was written by one rank
(from the save trace), and carries the values the reference run's checkpoint carries, under
whatever key: a fix may not pass by deleting the work a collective protected."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need
from grader.evidence import contents
from grader.evidence.checkpoint import final_checkpoint
from grader.evidence.layouts import LayoutError, load_checkpoint


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
    # from the save trace: one rank wrote it (every rank saving one path is a race, apex#629)
    single_writer: bool = True
    rtol: float = Field(1e-5, ge=0)
    atol: float = Field(1e-6, ge=0)


# A value matches the reference's within this: the exercises' values are means over the same
# samples, reduced in another order at most (measured: collective-deadlock's val_loss, reference
# against valid variants, differs by at most 3e-7 relative; a value computed on one rank's shard
# instead of all differs by over 1e-2).
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
    if spec.reference_values:
        ref = need(ctx, name, "reference")
        if isinstance(ref, CheckResult):
            return ref
        try:
            theirs = load_checkpoint(Path(ref.run_dir) / "work" / spec.path, Path(ref.run_dir) / "work")
        except LayoutError as e:
            return CheckResult(name, False, f"the reference run's checkpoint does not load: {e}", evidence,
                               environment=True)
        compared = evidence.setdefault("reference_comparison", {})
        for k in spec.reference_values:
            want = contents.numbers({k: theirs.get(k)} if isinstance(theirs, dict) else {}, 1).get(k)
            if want is None:
                return CheckResult(name, False, f"the reference run's checkpoint holds no number under {k!r}",
                                   evidence, environment=True)
            # never the reference's figure in a message: it could be copied into a checkpoint that
            # skipped the work; the candidate's own numbers are theirs to see
            at = contents.find_value(ckpt, want, VALUE_RTOL, VALUE_ATOL)
            compared[k] = {"found_at": at}
            if at is None:
                held = contents.numbers(ckpt)
                listing = ", ".join(f"{p} = {v:.6g}" for p, v in list(held.items())[:6]) or "no numbers"
                return CheckResult(name, False, f"the checkpoint holds no value equal to the reference run's {k} "
                                   f"(within {VALUE_RTOL:g} relative), under any key: it holds {listing}", evidence)
    what = " and " + ", ".join(spec.reference_values) + " as in the reference run" if spec.reference_values else ""
    return CheckResult(name, True, f"the checkpoint at {spec.path} loads and holds the final parameters{what}",
                       evidence)


CHECK = Check("checkpoint_valid", Spec, judge, needs_reference=lambda spec: bool(spec.reference_values),
              property="the checkpoint loads as the script's resume loads it and holds the final model and the state the brief names")
