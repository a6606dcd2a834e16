"""A rank's memory per optimizer step, from outside the candidate's reach where there is such a
measure: in a sandboxed run the parent sampled each rank's process tree from ``/proc`` at every
poll (``proc.jsonl``, signed by the parent) and stamped each step record with its own receive time
(``rt``). The memory at each step is the samples' value interpolated at that time, so a script that
patches what the rank itself reports (psutil, the step record's ``rss_mb``) changes nothing. Steps
outside the sampled span (before the first sample, after the last) would only repeat the nearest
sample and flatten the line: the slope is drawn through the steps inside it when there are enough.

What is sampled is the rank's process tree: the rank and its descendants (DataLoader workers,
persistent or not, in training or evaluation), as ``tree_mb``: the rank's RSS plus each
descendant's private memory (USS). A forked worker starts out sharing the rank's pages, which its
own RSS would count a second time (two workers tripled the level); a page it has copied, or memory
it allocated (a leak in a worker), is its own and counts. Run dirs sampled before ``tree_mb`` have
``tree_rss_mb`` (every process's RSS summed) instead. Each sample also carries the tree's
generation (``gen``: one more each time its set of processes changed), so each step can say which
set of processes it was measured on (``Series.segments``): a worker's start-up or exit moves the
level once, and is not a slope.

An unsandboxed run has no outside samples: its series is the step records' own ``rss_mb`` (or CUDA
allocated memory), as the rank measured it, its workers unseen; so is a sandboxed run too short for
two samples, and the series says so."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from grader.evidence import RunEvidence

OUTSIDE = "memory of its process tree (sampled from outside)"
REPORTED = "RSS (as the rank reported it: the run was too short for the outside sampler)"
MIN_SAMPLES = 2  # outside samples across the rank's steps, at least, to draw a line through them


@dataclass(frozen=True)
class Series:
    values: list[float]  # MB per step of the rank's last attempt
    what: str  # what was measured, for a message
    outside: bool  # measured by the parent, out of the candidate's reach
    sampled: tuple[int, int] | None = None  # [first, last) steps (indices) within the outside samples' span
    # per step, the generation of the process tree it was measured on, or None for a step between
    # two samples of different generations (workers started or ended there); None: one tree throughout
    segments: list[int | None] | None = None
    # the outside samples' places among the steps: for each sample, the index of the first step at or
    # after it (empty: no outside samples). Between two knots the values are interpolated, so a
    # one-time allocation between two samples reads as a ramp over every step between them.
    knots: tuple[int, ...] = ()

    def span(self, warmup: int, min_points: int) -> tuple[int, int]:
        """[lo, hi): the steps after warm-up to draw the slope through: those inside the sampled span
        when at least ``min_points`` are, else all of them."""
        if self.sampled is not None:
            lo, hi = max(self.sampled[0], warmup), self.sampled[1]
            if hi - lo >= min_points:
                return lo, hi
        return warmup, len(self.values)

    def after(self, warmup: int, min_points: int) -> list[float]:
        lo, hi = self.span(warmup, min_points)
        return self.values[lo:hi]

    def groups(self, warmup: int, min_points: int) -> list[list[tuple[int, float]]] | None:
        """The (step index, value) pairs of ``after`` split into runs measured on one process tree
        (steps between two generations left out), or None where one tree held throughout."""
        if self.segments is None:
            return None
        lo, hi = self.span(warmup, min_points)
        gens = self.segments[lo:hi]
        if len({g for g in gens if g is not None}) <= 1 and None not in gens:
            return None
        out: list[list[tuple[int, float]]] = []
        prev: int | None = None
        for i, (g, y) in enumerate(zip(gens, self.values[lo:hi])):
            if g is None:
                prev = None
                continue
            if g != prev:
                out.append([])
                prev = g
            out[-1].append((lo + i, y))
        return out

    def without_largest_rise(self, group: list[tuple[int, float]]) -> list[list[tuple[int, float]]]:
        """``group`` split at the one interval between two consecutive samples where the values rose
        most (its inner steps left out, a level of its own on each side), or ``[group]`` where its values
        never rose. Memory that grows steadily keeps its slope on both sides, a one-time
        allocation (a worker's first evaluation) does not: it moved the level once."""
        if len(group) < 2:
            return [group]
        first, last = group[0][0], group[-1][0]
        # the group's own ends bound its first and last intervals (a set of processes starts and
        # ends between two samples)
        inner = sorted({first, last} | {k for k in self.knots if first <= k <= last})
        at = dict(group)  # a group is a contiguous run of steps: every knot inside it is one of them
        rise, a, b = max((at[b] - at[a], a, b) for a, b in zip(inner, inner[1:]))
        if rise <= 0:
            return [group]
        return [[(x, y) for x, y in group if x <= a], [(x, y) for x, y in group if x >= b]]


def interpolate(ts: list[float], ys: list[float], at: float) -> float:
    """Linear interpolation of samples (``ts`` sorted); the nearest sample outside their span."""
    i = bisect_left(ts, at)
    if i <= 0:
        return ys[0]
    if i >= len(ts):
        return ys[-1]
    t0, t1 = ts[i - 1], ts[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * ((at - t0) / (t1 - t0) if t1 > t0 else 0.0)


def _generation(ts: list[float], gens: list[int], at: float) -> int | None:
    """The tree generation at time ``at``: the samples' on both sides when they agree, else None."""
    i = bisect_left(ts, at)
    if i <= 0:
        return gens[0]
    if i >= len(ts):
        return gens[-1]
    return gens[i] if gens[i - 1] == gens[i] or ts[i] == at else None


def rank_series(ev: RunEvidence, rank: int) -> Series:
    obs = ev.ranks[rank]
    if obs.cuda_alloc_mb:  # device memory: only the rank can read it (reported, not outside)
        return Series(list(obs.cuda_alloc_mb), "allocated CUDA memory", False)
    if not ev.sandboxed:
        return Series(list(obs.rss_mb), "RSS", False)  # as the rank reported it: an unsandboxed run
    steps = [e for e in ev.events(rank) if e.get("kind") == "step"]
    last = max((int(e.get("attempt", 0)) for e in steps), default=0)
    rts = [float(e["rt"]) for e in steps if int(e.get("attempt", 0)) == last and "rt" in e]
    samples = sorted((float(s["t"]), float(s["tree_mb"] if "tree_mb" in s else s["tree_rss_mb"]), int(s.get("gen", 0)))
                     for s in ev.proc_samples(rank)
                     if s.get("a") == last and "t" in s and ("tree_mb" in s or "tree_rss_mb" in s)
                     # a rank that had exited and was not yet reaped read 0 MB (samples before the
                     # sampler left such processes out): not a measure of what it held
                     and float(s.get("rss_mb") or 0) > 0)
    ts, ys, gens = [t for t, _, _ in samples], [y for _, y, _ in samples], [g for _, _, g in samples]
    if not rts or sum(1 for t in ts if rts[0] <= t <= rts[-1]) < MIN_SAMPLES:
        return Series(list(obs.rss_mb), REPORTED, False)
    lo = bisect_left(rts, ts[0])
    hi = bisect_left(rts, ts[-1], lo)
    segments = [_generation(ts, gens, t) for t in rts] if len(set(gens)) > 1 else None
    knots = tuple(sorted({bisect_left(rts, t) for t in ts}))
    return Series([interpolate(ts, ys, t) for t in rts], OUTSIDE, True, (lo, hi), segments, knots)
