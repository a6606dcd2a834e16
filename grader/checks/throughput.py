"""throughput: the submission's steps/s against the broken script's and the reference's, measured
side by side in interleaved rounds (``grader/throughput.py``), normalised so the broken baseline is
0 and the reference 1. The candidate's start-up beyond the slower of the other two is charged to
its steps/s, so work moved before the first step (where steps/s cannot see it) is not free. Counted only when every required correctness check passed: a fast wrong
answer earns nothing. Its runs are the measurement rounds, not the grading's ordinary runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from grader.checks.base import Check, CheckResult, CheckSpec, Context
from grader.throughput import Measuring, ThroughputResult, measure_for, summarize

if TYPE_CHECKING:
    from grader.manifest import Manifest


class Spec(CheckSpec):
    name: Literal["throughput"]
    required: bool = False  # where speed is the whole exercise, set true: it then gates the pass
    target_speedup: float = Field(gt=1.0, description="the reference's expected speedup")
    rounds: int = Field(3, ge=1)
    warmup_rounds: int = Field(1, ge=0)
    suspicious_factor: float = Field(2.0, gt=1.0, description="flag speedups this far above the reference")
    # A kit-owned script in the exercise folder (never editable) that runs the same model, batches
    # and steps with no input pipeline and no communication: the compute bound steps/s are
    # reported against. Run as a fourth role in each measured round.
    bound: str | None = None

    @field_validator("bound")
    @classmethod
    def _bound(cls, v: str | None) -> str | None:
        if v is not None and (not v.endswith(".py") or v.startswith("/") or ".." in Path(v).parts):
            raise ValueError(f"{v!r} must be a .py file inside the exercise folder, e.g. \"bound.py\"")
        return v

    @property
    def pass_speedup(self) -> float:
        """Half the reference's expected gain: a fix that gets there has found the bottleneck."""
        return 1 + 0.5 * (self.target_speedup - 1)

    def validate_in(self, manifest: Manifest) -> None:
        if self.bound in manifest.editable:
            raise ValueError(f"bound: {self.bound!r} is editable; the bound must be a kit-owned file the "
                             "candidate cannot change")

    def missing_files(self, folder: Path) -> str | None:
        if self.bound and not (folder / self.bound).is_file():
            return (f"bound: {self.bound!r} is not a file in {folder}; name the compute-bound script that "
                    "exists there")
        return None


def measure(spec: Spec, how: Measuring) -> dict[str, Any]:
    return measure_for(how, spec.rounds, spec.warmup_rounds, spec.bound is not None, spec.pass_speedup)


def summary(spec: Spec, measured: dict[str, Any], counted: bool) -> ThroughputResult:
    tp = summarize(measured["rounds"], spec.suspicious_factor, spec.pass_speedup, bound=measured.get("bound", False))
    if measured.get("quick"):
        n = len(measured["rounds"])
        tp.note = (tp.note + "; " if tp.note else "") + (
            f"{'one round' if n == 1 else f'{n} rounds'}, no warm-up, no compute bound (quick)")
    tp.counted = counted
    if not counted:
        tp.note = (tp.note + "; " if tp.note else "") + "not counted: a required correctness check failed"
    return tp


def judge(spec: Spec, ctx: Context) -> CheckResult:
    counted = all(c.passed for c in ctx.earlier if c.required)
    tp = summary(spec, ctx.measurements["throughput"], counted)
    msg = (f"{tp.speedup:.2f}x the broken baseline's steps/s (median of {len(tp.rounds)} rounds, spread "
           f"{tp.spread:.0%}); the reference reaches {tp.reference_speedup:.2f}x; pass at "
           f"{tp.pass_speedup:.2f}x")
    if tp.startup_charge_s:
        msg += (f"; its start-up (start to first step, less a step) took {tp.candidate_startup_s:.1f} s, "
                f"{tp.startup_charge_s:.1f} s more than the slower of the broken script's and the reference's (medians "
                "of the rounds), charged to its steps/s (work moved before the first step still counts; "
                f"{tp.uncharged_speedup:.2f}x from the third step on)")
    if tp.fraction_of_bound is not None:
        msg += (f"; {tp.fraction_of_bound:.0%} of the compute bound's steps/s (reference "
                f"{tp.reference_fraction_of_bound:.0%}; reported, not graded)")
    if tp.note:
        msg += f" ({tp.note})"
    return CheckResult("throughput", tp.passed and tp.counted, msg, tp.to_json(),
                       credit=tp.normalized if tp.counted else 0.0)


CHECK = Check("throughput", Spec, judge, needs_reference=lambda spec: True, after_others=True, measure=measure,
              property='the job trains faster, measured side by side with the broken script and the reference')
