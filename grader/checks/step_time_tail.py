"""step_time_tail: p99 over median of each rank's step times after warm-up. A stall every k steps (a
synchronous checkpoint, an upload) puts the p99 far above the median while the median hardly moves;
slowing every step down to hide it is caught against the reference.

Step times are the parent's: the time between the receive times it stamped on consecutive step
records (``grader.evidence.steptimes``), so a script that resets or slows the in-rank step timer
hides nothing; the rank's own ``dt`` only where the run had no record channel. A rank that held its
step records back and sent them later (evenly paced, to erase the stall from their receive times)
fails: a record of a later step reached the parent long before them (``grader.checks._held``).

With ``writes_off_loop``, checkpoint-sized writes the training thread made between two steps fail
too, however short the steps they ran in (``grader.evidence.loop_writes``): a stall whose cause is
still in the loop is only as small as the disk is fast."""

from __future__ import annotations

import math
import os
import statistics
from typing import Any, Literal

from pydantic import Field

from grader.checks._held import held_back
from grader.checks.base import Check, CheckResult, CheckSpec, Context, need
from grader.evidence import RunEvidence
from grader.evidence.loop_writes import LoopWrites, loop_writes
from grader.evidence.steptimes import StepTimes, step_times


class Spec(CheckSpec):
    name: Literal["step_time_tail"]
    max_p99_over_median: float = Field(gt=1.0)
    warmup_steps: int = Field(5, ge=0)
    min_steps: int = Field(100, ge=20, description="steps after warm-up a p99 needs to mean something")
    # the median step may be at most this many times the reference run's: slowing every step down
    # also hides a stall from the ratio
    max_median_over_reference: float | None = Field(None, gt=1.0)
    # checkpoint-sized writes on the training thread inside the step loop, at this many steps or
    # more, fail: the loop still waits for checkpoint I/O, only less of it (0: not checked)
    writes_off_loop: int = Field(0, ge=0, description="steps with such writes that fail the check; 0: off")


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile: a value that occurred, never an interpolation between two."""
    s = sorted(xs)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def _median_after(ev: RunEvidence, warmup: int) -> float:
    per_rank = [step_times(ev, r).seconds[warmup:] for r in sorted(ev.ranks)]
    meds = [statistics.median(xs) for xs in per_rank if xs]
    return statistics.median(meds) if meds else 0.0


def _step_numbers(steps: list[int], limit: int = 3) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    more = f" and {len(steps) - limit} more" if len(steps) > limit else ""
    return f"step{'s' if len(steps) > 1 else ''} {shown}{more}"


def _seconds(xs: list[float]) -> str:
    lo, hi = min(xs), max(xs)
    return f"{lo:.2f} s" if math.isclose(lo, hi, rel_tol=0.05) else f"{lo:.2f}-{hi:.2f} s"


def _steps_list(steps: list[tuple[int, float]], limit: int = 3) -> str:
    return f"{_step_numbers([s for s, _ in steps], limit)} took {_seconds([t for _, t in steps])}"


def _spans(ev: RunEvidence, rank: int, times: StepTimes) -> dict[int, tuple[float, float]]:
    """Each step's (start, end) on the clock its duration was measured with."""
    last = max((int(e.get("attempt", 0)) for e in ev.events(rank) if e.get("kind") == "step"), default=0)
    recs = [e for e in ev.events(rank) if e.get("kind") == "step" and int(e.get("attempt", 0)) == last]
    clock = "rt" if times.source == "parent" else "t"
    return {s: (float(e[clock]) - d, float(e[clock])) for s, d, e in zip(times.steps, times.seconds, recs)}


def _during_uploads(ev: RunEvidence, rank: int, times: StepTimes, slow: list[int],
                    evidence: dict[str, Any]) -> str:
    """How many slow steps overlapped an upload the artifact store service logged (its own clock,
    outside the ranks), as evidence of what the step loop was waiting for."""
    puts = [(float(p["t0"]), float(p["t1"])) for p in (ev.store.puts if ev.store else [])
            if p.get("status") == "ok" and "t0" in p and "t1" in p]
    if not puts or not slow:
        return ""
    spans = _spans(ev, rank, times)
    hit = [s for s in slow if s in spans and any(a < spans[s][1] and b > spans[s][0] for a, b in puts)]
    evidence["slow_steps_during_uploads"] = hit[:50]
    if not hit:
        return ""
    return (f"; the artifact store was receiving an upload during {len(hit)} of them (its own log: "
            f"{_seconds([b - a for a, b in puts])} per upload)")


def _loop_writes_message(w: LoopWrites) -> str:
    ops = {"save": "torch.save", "copy": "a file copy", "write": "a DCP write", "upload": "an upload"}
    kinds = sorted({ops.get(o.op, o.op) for o in w.writes})
    names = sorted({os.path.basename(o.path or "?") for o in w.writes})
    mib = max((o.bytes or 0) for o in w.writes) / 2**20
    return (f"rank {w.rank} wrote checkpoints on the training thread inside the step loop, in "
            f"{_step_numbers(w.steps)} ({' and '.join(kinds)} of "
            f"{', '.join(names[:3])}{' ...' if len(names) > 3 else ''}, up to {mib:.1f} MiB, "
            f"{_seconds([float(o.dur or 0) for o in w.writes])} each: {w.share:.0%} of the {w.step_s:.2f} s those steps took): every step it ran in waited for "
            "checkpoint I/O, however fast the disk was this time")


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "step_time_tail"
    ev = need(ctx, name, "main")
    if isinstance(ev, CheckResult):
        return ev
    bound = spec.max_p99_over_median
    evidence: dict[str, Any] = {"max_p99_over_median": bound, "warmup_steps": spec.warmup_steps, "ranks": {}}
    worst: tuple[float, int] | None = None
    slow_by_rank: dict[int, list[tuple[int, float]]] = {}
    measured = {r: step_times(ev, r) for r in sorted(ev.ranks)}
    evidence["clock"] = "parent" if all(m.source == "parent" for m in measured.values()) else "rank"
    for r in sorted(ev.ranks):
        held = held_back(ev, r) if measured[r].source == "parent" else None
        if held is not None:
            evidence["held_back"] = {"rank": r, "step": held.step, "lag_s": held.lag_s, "records": held.held}
            return CheckResult(name, False, f"{held.sentence()}: their receive times say when the rank chose to "
                               "send them, not when its steps ran, so its step times cannot be measured", evidence)
    for r in sorted(ev.ranks):
        times = measured[r].seconds[spec.warmup_steps:]
        numbers = measured[r].steps[spec.warmup_steps:]
        if len(times) < spec.min_steps:
            evidence["ranks"][r] = {"steps": len(times)}
            return CheckResult(name, False, f"rank {r} made {len(times)} steps after the {spec.warmup_steps} "
                               f"warm-up steps; a p99 needs at least {spec.min_steps}", evidence)
        med, p99 = statistics.median(times), percentile(times, 99)
        ratio = p99 / med if med > 0 else math.inf
        slow = [(n, t) for n, t in zip(numbers, times) if t > bound * med]
        slow_by_rank[r] = slow
        evidence["ranks"][r] = {"steps": len(times), "p50_s": round(med, 4), "p99_s": round(p99, 4),
                                "max_s": round(max(times), 4), "p99_over_median": round(ratio, 2),
                                "slow_steps": [s for s, _ in slow][:50]}
        if worst is None or ratio > worst[0]:
            worst = (ratio, r)
    assert worst is not None  # need() refused a run without ranks, and each rank sets it or returns
    ratio, r = worst
    info = evidence["ranks"][r]
    evidence["p99_over_median"] = info["p99_over_median"]
    if ratio > bound:
        slow = slow_by_rank[r]
        what = f": {_steps_list(slow)} against a median of {info['p50_s']:.3f} s" if slow else ""
        what += _during_uploads(ev, r, measured[r], [s for s, _ in slow], evidence)
        return CheckResult(name, False, f"rank {r}'s p99 step time is {ratio:.1f}x its median (p50 "
                           f"{info['p50_s']:.3f} s, p99 {info['p99_s']:.3f} s, max {info['max_s']:.3f} s; "
                           f"bound {bound:g}x){what}", evidence)
    if spec.writes_off_loop:
        found = [w for w in (loop_writes(ev, r, measured[r]) for r in sorted(ev.ranks)) if w.steps]
        evidence["loop_writes"] = {w.rank: {"steps": w.steps[:50], "write_s": round(w.write_s, 3),
                                            "step_s": round(w.step_s, 3)} for w in found}
        worst_w = max(found, key=lambda w: len(w.steps), default=None)
        if worst_w is not None and len(worst_w.steps) >= spec.writes_off_loop:
            return CheckResult(name, False, _loop_writes_message(worst_w), evidence)
    if spec.max_median_over_reference:
        ref = need(ctx, name, "reference")
        if isinstance(ref, CheckResult):
            return ref
        mine, theirs = _median_after(ev, spec.warmup_steps), _median_after(ref, spec.warmup_steps)
        evidence.update(median_s=round(mine, 4), reference_median_s=round(theirs, 4))
        if theirs > 0 and mine / theirs > spec.max_median_over_reference:
            return CheckResult(name, False, f"the median step took {mine:.3f} s, {mine / theirs:.1f}x the "
                               f"reference run's {theirs:.3f} s (bound {spec.max_median_over_reference:g}x): "
                               "every step is slower, which also flattens the tail", evidence)
    return CheckResult(name, True, f"p99 step time at most {ratio:.2f}x the median on every rank (rank {r}: "
                       f"p50 {info['p50_s']:.3f} s, p99 {info['p99_s']:.3f} s; bound {bound:g}x)", evidence)


CHECK = Check("step_time_tail", Spec, judge, needs_reference=lambda spec: bool(spec.max_median_over_reference),
              property='no step is much slower than the median step: the stall is out of the step loop')
