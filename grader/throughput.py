"""Throughput measured fairly (docs/design.md): the broken baseline, the candidate and the reference run
interleaved in rounds (B C R, B C R, ...) after warm-up rounds, on the same machine in the same
grading run. The figure is the median of per-round ratios, with its spread; absolute steps/s are
reported but never graded. Normalised as in RE-Bench: 0 = broken, 1 = reference, floored at 0.

Where the exercise declares a compute bound (the same model and batches, already in memory, no
input pipeline, no communication), it runs as a fourth role in each measured round (B C R X), and
the candidate's and the reference's steps/s are reported as fractions of it: how close to the
limit, not only how far from the start. The fraction is reported, never graded."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from grader.evidence import RunEvidence

ROLES = ("broken", "candidate", "reference")
BOUND = "bound"


@dataclass
class ThroughputResult:
    speedup: float  # candidate / broken, median over rounds
    spread: float  # (max - min) / median of the per-round candidate ratios
    reference_speedup: float
    normalized: float
    rounds: list[dict[str, Any]] = field(default_factory=list)
    suspicious: bool = False
    counted: bool = False  # only when the workload is intact and the correctness checks pass
    passed: bool = False
    pass_speedup: float = 0.0
    note: str = ""
    # steps/s as a fraction of the compute bound's, median of per-round ratios (None: no bound)
    fraction_of_bound: float | None = None
    reference_fraction_of_bound: float | None = None
    bound_spread: float | None = None  # (max - min) / median of the candidate's per-round fractions

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def job_rate(ev: RunEvidence) -> float:
    """A job is as fast as its slowest rank: the minimum of per-rank steps/s."""
    rates = [o.steps_per_s for o in ev.ranks.values()]
    return min(rates) if rates else 0.0


def fractions_of_bound(per_round: list[dict[str, float]], role: str) -> list[float]:
    """Per round, ``role``'s steps/s over the bound's (rounds where the bound made no steps skipped)."""
    return [r[role] / r[BOUND] for r in per_round if r.get(BOUND, 0) > 0]


def median_fraction(per_round: list[dict[str, float]], role: str) -> float | None:
    fr = fractions_of_bound(per_round, role)
    return round(statistics.median(fr), 4) if fr else None


def measure(run: Callable[[str, str], RunEvidence], rounds: int, warmup_rounds: int,
            bound: bool = False) -> list[dict[str, float]]:
    """Launch the roles interleaved and return each measured round's steps/s per role.
    ``run(role, tag)`` launches one role and returns its evidence. With ``bound``, each measured
    round also runs the compute bound (not the warm-up rounds: it has no pipeline to warm)."""
    for w in range(warmup_rounds):
        for role in ROLES:
            run(role, f"warmup{w}")
    roles = ROLES + ((BOUND,) if bound else ())
    per_round = []
    for i in range(rounds):
        rates = {}
        for role in roles:
            ev = run(role, f"round{i}")
            # a bound that did not finish measured nothing: its partial rate must not pose as the limit
            ok = role != BOUND or getattr(ev, "status", "ok") == "ok"
            rates[role] = job_rate(ev) if ok else 0.0
        per_round.append(rates)
    return per_round


def summarize(per_round: list[dict[str, float]], suspicious_factor: float, pass_speedup: float,
              bound: bool = False) -> ThroughputResult:
    """The figures of measured rounds: medians of per-round ratios, spread, RE-Bench normalisation,
    the suspicious flag, and the fractions of the compute bound."""
    cand = [r["candidate"] / r["broken"] for r in per_round if r["broken"] > 0]
    ref = [r["reference"] / r["broken"] for r in per_round if r["broken"] > 0]
    if not cand or not ref:
        return ThroughputResult(0.0, 0.0, 0.0, 0.0, per_round, note="the broken baseline made no steps")
    speedup, ref_speedup = statistics.median(cand), statistics.median(ref)
    spread = (max(cand) - min(cand)) / speedup if speedup else 0.0
    normalized = max(0.0, (speedup - 1) / (ref_speedup - 1)) if ref_speedup > 1 else 0.0
    suspicious = ref_speedup > 1 and speedup > suspicious_factor * ref_speedup
    note = ("speedup far above the reference's: a human should look at how it was achieved"
            if suspicious else "")
    tp = ThroughputResult(round(speedup, 4), round(spread, 4), round(ref_speedup, 4), round(normalized, 4),
                          per_round, suspicious=suspicious, passed=speedup >= pass_speedup,
                          pass_speedup=pass_speedup, note=note)
    if bound:
        tp.fraction_of_bound = median_fraction(per_round, "candidate")
        tp.reference_fraction_of_bound = median_fraction(per_round, "reference")
        fr = fractions_of_bound(per_round, "candidate")
        if tp.fraction_of_bound is None:
            tp.note = (tp.note + "; " if tp.note else "") + "the compute bound made no steps"
        elif tp.fraction_of_bound > 0:
            tp.bound_spread = round((max(fr) - min(fr)) / tp.fraction_of_bound, 4)
    return tp
