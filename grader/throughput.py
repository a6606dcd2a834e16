"""Throughput measured fairly (docs/design.md): the broken baseline, the candidate and the reference run
interleaved in rounds (B C R, B C R, ...) after warm-up rounds, on the same machine in the same
grading run. The figure is the median of per-round ratios, with its spread; absolute steps/s are
reported but never graded. Normalised as in RE-Bench: 0 = broken, 1 = reference, floored at 0.

Where the exercise declares a compute bound (the same model and batches, already in memory, no
input pipeline, no communication), it runs as a fourth role in each measured round (B C R X), and
the candidate's and the reference's steps/s are reported as fractions of it: how close to the
limit, not only how far from the start. The fraction is reported, never graded.

Steps/s is measured from the third step on, so work moved before the first step would vanish from
it (features precomputed at start-up while the job takes as long as before). Each round therefore
also times every role's start-up, from the bootstrap's start record (torch imported, the script
next) to the first step record, both by the parent's receive times, less one step at the role's
rate (the first step's own work, the broken pipeline's included, is no start-up). Whatever of the
candidate's exceeds the slower of the broken script's and the reference's, each the median over
the rounds, is charged to every round's measured window: ``intervals / (intervals / rate +
excess)``. Start-up the script needs anyway (a model built, a process group joined, loader
workers spawned) costs the candidate nothing."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from grader.evidence import RunEvidence
from harness.observe import WARMUP_STEPS

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
    # seconds of the candidate's start-up beyond the slower of the broken's and the reference's,
    # charged to its steps/s, median over rounds (None: the rounds carry no start-up times)
    startup_charge_s: float | None = None
    candidate_startup_s: float | None = None  # median over rounds
    uncharged_speedup: float | None = None  # the speedup before the charge, median over rounds

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def job_rate(ev: RunEvidence) -> float:
    """A job is as fast as its slowest rank: the minimum of per-rank steps/s."""
    rates = [o.steps_per_s for o in ev.ranks.values()]
    return min(rates) if rates else 0.0


def _first(recs: list[dict[str, Any]], kind: str, attempt: int) -> float | None:
    r = next((e for e in recs if e.get("kind") == kind and int(e.get("attempt", 0)) == attempt), None)
    if r is None:
        return None
    t = r.get("rt", r.get("t"))
    return float(t) if isinstance(t, (int, float)) else None


def startup_s(ev: RunEvidence) -> float | None:
    """The job's start-up: the slowest rank's time from its start record to its first step record,
    in its last attempt, by the parent's receive times where there are any; None where a rank has
    no such pair of records (or the evidence has no events: a hand-built stand-in)."""
    events = getattr(ev, "events", None)
    if events is None or not ev.ranks:
        return None
    out = []
    for r in ev.ranks:
        recs = events(r)
        last = max((int(e.get("attempt", 0)) for e in recs), default=0)
        start, step = _first(recs, "start", last), _first(recs, "step", last)
        if start is None or step is None:
            return None
        out.append(max(0.0, step - start))
    return max(out)


def intervals(ev: RunEvidence) -> int:
    """The step intervals ``job_rate``'s window spans (``harness.observe.rate``: after warm-up)."""
    n = max((o.steps for o in ev.ranks.values()), default=0) if ev.ranks else 0
    return n - WARMUP_STEPS - 1 if n > WARMUP_STEPS + 1 else max(n - 1, 0)


def charged(rate: float, n: int, extra_s: float) -> float:
    """Steps/s over a window of ``n`` intervals at ``rate``, with ``extra_s`` seconds added to it."""
    if rate <= 0 or n <= 0 or extra_s <= 0:
        return rate
    return n / (n / rate + extra_s)


def _before_first_step(r: dict[str, Any], role: str) -> float | None:
    """``role``'s start-up in round ``r`` less one of its steps at its measured rate: the first step
    record comes after the first step's own work (for the broken script, its slow pipeline's),
    which is no start-up."""
    su = (r.get("startup_s") or {}).get(role)
    if not isinstance(su, (int, float)):
        return None
    rate = r.get(role) or 0.0
    return max(0.0, su - (1.0 / rate if rate > 0 else 0.0))


def startup_charge(per_round: list[dict[str, Any]]) -> float | None:
    """The seconds of the candidate's start-up beyond the slower of the broken's and the
    reference's, each role's the median over the rounds (one round's start-up on a loaded machine
    can be twice another's), or None where the rounds carry no start-up times."""
    su: dict[str, list[float]] = {role: [] for role in ROLES}
    for r in per_round:
        got = {role: _before_first_step(r, role) for role in ROLES}
        known = {role: v for role, v in got.items() if v is not None}
        if len(known) == len(got):
            for role, v in known.items():
                su[role].append(v)
    if not su["candidate"]:
        return None
    med = {role: statistics.median(v) for role, v in su.items()}
    return max(0.0, med["candidate"] - max(med["broken"], med["reference"]))


def candidate_rate(r: dict[str, Any], charge: float | None) -> float:
    """The candidate's steps/s in round ``r``, with ``charge`` seconds added to its window."""
    if not charge:
        rate: float = r["candidate"]
        return rate
    return charged(r["candidate"], int((r.get("intervals") or {}).get("candidate", 0)), charge)


def fractions_of_bound(per_round: list[dict[str, Any]], role: str) -> list[float]:
    """Per round, ``role``'s steps/s over the bound's (rounds where the bound made no steps skipped)."""
    return [r[role] / r[BOUND] for r in per_round if r.get(BOUND, 0) > 0]


def median_fraction(per_round: list[dict[str, Any]], role: str) -> float | None:
    fr = fractions_of_bound(per_round, role)
    return round(statistics.median(fr), 4) if fr else None


def measure(run: Callable[[str, str], RunEvidence], rounds: int, warmup_rounds: int,
            bound: bool = False) -> list[dict[str, Any]]:
    """Launch the roles interleaved and return each measured round's steps/s per role, with each
    role's start-up (``startup_s``) and the intervals its rate spans (``intervals``).
    ``run(role, tag)`` launches one role and returns its evidence. With ``bound``, each measured
    round also runs the compute bound (not the warm-up rounds: it has no pipeline to warm)."""
    for w in range(warmup_rounds):
        for role in ROLES:
            run(role, f"warmup{w}")
    roles = ROLES + ((BOUND,) if bound else ())
    per_round = []
    for i in range(rounds):
        rates: dict[str, Any] = {}
        for role in roles:
            ev = run(role, f"round{i}")
            # a bound that did not finish measured nothing: its partial rate must not pose as the limit
            ok = role != BOUND or getattr(ev, "status", "ok") == "ok"
            rates[role] = job_rate(ev) if ok else 0.0
            if role in ROLES:
                su = startup_s(ev)
                if su is not None:
                    rates.setdefault("startup_s", {})[role] = round(su, 3)
                    rates.setdefault("intervals", {})[role] = intervals(ev)
        per_round.append(rates)
    return per_round


@dataclass
class Measuring:
    """What the measurement needs from the grading: a launcher per role (broken, candidate,
    reference, bound) and the options of this grading."""

    run: Callable[[str, str], Any]  # (role, tag) -> RunEvidence
    repeats: int | None = None  # the grader's --repeats, else the exercise's rounds
    quick: bool = False  # one round, no warm-up, no bound: enough to show a script is no faster


# A quick measurement whose single round lands between the pass bar and this many times it is
# ambiguous on a busy machine (a broken script measured against itself read 1.86x once, at load 8,
# against a bar of 1.75x): two more rounds are taken and the median decides.
AMBIGUOUS = 1.5


def measure_for(how: Measuring, rounds: int, warmup_rounds: int, bound: bool, pass_speedup: float) -> dict[str, Any]:
    """The rounds a grading takes: ``rounds`` after ``warmup_rounds`` (``how.repeats`` overrides the
    count), or in a quick measurement one round, and two more where it lands near the pass bar."""
    if how.quick:
        per_round = measure(how.run, 1, 0, bound=False)
        r = per_round[0]
        ratio = candidate_rate(r, startup_charge(per_round)) / r["broken"] if r["broken"] > 0 else 0.0
        if pass_speedup <= ratio < AMBIGUOUS * pass_speedup:
            per_round += measure(lambda role, tag: how.run(role, tag.replace("round", "again")), 2, 0, bound=False)
        return {"rounds": per_round, "bound": False, "quick": True}
    return {"rounds": measure(how.run, how.repeats or rounds, warmup_rounds, bound=bound), "bound": bound,
            "quick": False}


def summarize(per_round: list[dict[str, Any]], suspicious_factor: float, pass_speedup: float,
              bound: bool = False) -> ThroughputResult:
    """The figures of measured rounds: medians of per-round ratios, spread, RE-Bench normalisation,
    the suspicious flag, and the fractions of the compute bound."""
    charge = startup_charge([r for r in per_round if r["broken"] > 0])
    cand = [candidate_rate(r, charge) / r["broken"] for r in per_round if r["broken"] > 0]
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
    if charge is not None:
        tp.startup_charge_s = round(charge, 3)
        tp.candidate_startup_s = round(statistics.median(
            v for r in per_round if r["broken"] > 0 and (v := _before_first_step(r, "candidate")) is not None), 3)
        tp.uncharged_speedup = round(statistics.median(r["candidate"] / r["broken"] for r in per_round
                                                       if r["broken"] > 0), 4)
    if bound:
        tp.fraction_of_bound = median_fraction(per_round, "candidate")
        tp.reference_fraction_of_bound = median_fraction(per_round, "reference")
        fr = fractions_of_bound(per_round, "candidate")
        if tp.fraction_of_bound is None:
            tp.note = (tp.note + "; " if tp.note else "") + "the compute bound made no steps"
        elif tp.fraction_of_bound > 0:
            tp.bound_spread = round((max(fr) - min(fr)) / tp.fraction_of_bound, 4)
    return tp
