"""A rank's memory per optimizer step, from outside the candidate's reach where there is such a
measure: in a sandboxed run the parent sampled each rank's process tree from ``/proc`` every half
second (``proc.jsonl``, signed by the parent) and stamped each step record with its own receive time
(``rt``). The RSS at each step is the samples' value interpolated at that time, so a script that
patches what the rank itself reports (psutil, the step record's ``rss_mb``) changes nothing.

An unsandboxed run has no outside samples: its series is the step records' own ``rss_mb`` (or CUDA
allocated memory), as the rank measured it, and says so."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from grader.evidence import RunEvidence

OUTSIDE = "RSS (its processes, sampled from outside)"
MIN_SAMPLES = 4  # outside samples across the measured steps, at least, to draw a line through them


@dataclass(frozen=True)
class Series:
    values: list[float]  # MB per step of the rank's last attempt
    what: str  # what was measured, for a message
    outside: bool  # measured by the parent, out of the candidate's reach


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
    if not rts or not samples:
        return Series([], OUTSIDE, True)
    ts, ys = [t for t, _ in samples], [y for _, y in samples]
    return Series([interpolate(ts, ys, t) for t in rts], OUTSIDE, True)


def window_samples(ev: RunEvidence, rank: int, warmup: int) -> int:
    """Outside samples taken while the rank made its steps after warm-up (its last attempt)."""
    steps = [e for e in ev.events(rank) if e.get("kind") == "step"]
    last = max((int(e.get("attempt", 0)) for e in steps), default=0)
    rts = [float(e["rt"]) for e in steps if int(e.get("attempt", 0)) == last and "rt" in e][warmup:]
    if not rts:
        return 0
    return sum(1 for s in ev.proc_samples(rank) if s.get("a") == last and rts[0] <= float(s.get("t", 0)) <= rts[-1])
