"""A rank's memory per optimizer step, from outside the candidate's reach where there is such a
measure: in a sandboxed run the parent sampled each rank's process tree from ``/proc`` at every
poll (``proc.jsonl``, signed by the parent) and stamped each step record with its own receive time
(``rt``). The RSS at each step is the samples' value interpolated at that time, so a script that
patches what the rank itself reports (psutil, the step record's ``rss_mb``) changes nothing. Steps
outside the sampled span (before the first sample, after the last) would only repeat the nearest
sample and flatten the line: the slope is drawn through the steps inside it when there are enough.

An unsandboxed run has no outside samples: its series is the step records' own ``rss_mb`` (or CUDA
allocated memory), as the rank measured it; so is a sandboxed run too short for two samples, and the
series says so."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from grader.evidence import RunEvidence

OUTSIDE = "RSS (its processes, sampled from outside)"
REPORTED = "RSS (as the rank reported it: the run was too short for the outside sampler)"
MIN_SAMPLES = 2  # outside samples across the rank's steps, at least, to draw a line through them


@dataclass(frozen=True)
class Series:
    values: list[float]  # MB per step of the rank's last attempt
    what: str  # what was measured, for a message
    outside: bool  # measured by the parent, out of the candidate's reach
    sampled: tuple[int, int] | None = None  # [first, last) steps (indices) within the outside samples' span

    def after(self, warmup: int, min_points: int) -> list[float]:
        """The values after warm-up to draw the slope through: those inside the sampled span when at
        least ``min_points`` are, else all of them."""
        ys = self.values[warmup:]
        if self.sampled is None:
            return ys
        lo, hi = max(self.sampled[0], warmup), self.sampled[1]
        inside = self.values[lo:hi]
        return inside if len(inside) >= min_points else ys


def interpolate(ts: list[float], ys: list[float], at: float) -> float:
    """Linear interpolation of samples (``ts`` sorted); the nearest sample outside their span."""
    i = bisect_left(ts, at)
    if i <= 0:
        return ys[0]
    if i >= len(ts):
        return ys[-1]
    t0, t1 = ts[i - 1], ts[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * ((at - t0) / (t1 - t0) if t1 > t0 else 0.0)


def rank_series(ev: RunEvidence, rank: int) -> Series:
    obs = ev.ranks[rank]
    if obs.cuda_alloc_mb:  # device memory: only the rank can read it (reported, not outside)
        return Series(list(obs.cuda_alloc_mb), "allocated CUDA memory", False)
    if not ev.sandboxed:
        return Series(list(obs.rss_mb), "RSS", False)  # as the rank reported it: an unsandboxed run
    steps = [e for e in ev.events(rank) if e.get("kind") == "step"]
    last = max((int(e.get("attempt", 0)) for e in steps), default=0)
    rts = [float(e["rt"]) for e in steps if int(e.get("attempt", 0)) == last and "rt" in e]
    samples = sorted((float(s["t"]), float(s["tree_rss_mb"])) for s in ev.proc_samples(rank)
                     if s.get("a") == last and "t" in s and "tree_rss_mb" in s)
    ts, ys = [t for t, _ in samples], [y for _, y in samples]
    if not rts or sum(1 for t in ts if rts[0] <= t <= rts[-1]) < MIN_SAMPLES:
        return Series(list(obs.rss_mb), REPORTED, False)
    lo = bisect_left(rts, ts[0])
    hi = bisect_left(rts, ts[-1], lo)
    return Series([interpolate(ts, ys, t) for t in rts], OUTSIDE, True, (lo, hi))
