"""Step records held back in the rank, seen on the parent's clock.

Under the record channel the parent stamps every record with its receive time (``rt``), and the
step checks time a rank's steps by when its step records arrive (``step_time_tail``) or place its
memory samples on its steps by them (``memory_flat``). A script can hold its step records back and
send them later, evenly paced or in one burst: their receive times then say nothing of when the
steps ran. The rank's own clock cannot tell (a held record can carry the time it is sent), but the
rank's other records can: every record that carries a step number at least ``k`` (a collective of
the trace, a save or an upload of the save trace, a batch of the sample ledger, an event) was made
after step ``k`` ended, and the harness sends step ``k``'s record as that step ends, before any of
them, on the same connection (a DataLoader worker has its own, and its ledger's step number is the
one it was forked at, never later). So step ``k``'s record reaching the parent more than
``HELD_S`` after a record of step ``k`` or later did is a record held back. Measured (the channel
server's ``LATE_S``, python benchmarks/record_lag.py): an honest record's transport delay is at
most 0.21 s (a collective batch); ``HELD_S`` is 1 s, as the server's.

A script that holds back every stream alike (all its records, keeping their order) leaves no
record of a later step to arrive first. Then the parent's samples of the rank tell: each sample
carries the CPU time the rank's own process had used (``cpu_s``), and a step of training costs CPU
(the forward, backward and optimizer are dispatched from Python even where a GPU does the
arithmetic). Step records that reached the parent between two samples on less than
``CPU_FLOOR_MS`` of the rank's CPU each were not sent as their steps ran: held back (or made up).
Measured (300 graded runs drawn at random from the validity gradings of every exercise, 3462
intervals of 0.25 s holding at least 5 steps, 2-core machine): the cheapest honest interval cost
2.05 ms of the rank's CPU a step (sampler-replay, about 240 steps/s); the floor is a tenth of that,
and at least ``MIN_CHEAP_STEPS`` such steps are needed. The hostile case ``hold-everything-leak``
sent 172 step records in one burst on under a millisecond. Judged only where the rank reported no
CUDA memory (a CPU run): on a GPU a step's CPU is launch overhead only, not measured here.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness import rundir

if TYPE_CHECKING:
    from grader.evidence import RunEvidence

HELD_S = 1.0
CPU_FLOOR_MS = 0.2  # a step that reached the parent on less of the rank's CPU than this was not worked then
MIN_CHEAP_STEPS = 20  # such steps, at least: not one short interval's jitter
SPAN_RATIO = 10.0  # a rank's steps arriving this many times faster than the reference's were held back
MIN_REF_SPAN_S = 2.0  # the reference's steps must have arrived over this long for the comparison to mean anything


@dataclass(frozen=True)
class Held:
    rank: int
    step: int  # the step whose record came latest after a later step's record
    lag_s: float  # how long after that record it arrived
    what: str  # the later record: "the collective trace", "the save trace", "the sample ledger", "a <kind> event"
    later_step: int  # the step number that record carried
    held: int  # step records that came more than HELD_S after a record of their step or later
    steps: int  # step records of the attempt
    cpu_ms: float | None = None  # held by the CPU rule: the rank's CPU over the intervals those records arrived in
    pace_ms: tuple[float, float] | None = None  # held by the reference rule: ms between its step records' arrivals, the reference's

    def sentence(self) -> str:
        if self.pace_ms is not None:
            mine, ref = self.pace_ms
            return (f"rank {self.rank}'s step records were held back in the rank: its {self.steps} step records reached "
                    f"the parent {mine:.2f} ms apart, where the reference run's, the same workload, arrived "
                    f"{ref:.0f} ms apart as its steps ran ({ref / max(mine, 1e-3):.0f}x; an honest fix's steps are not "
                    f"{SPAN_RATIO:g}x faster than the reference's)")
        if self.cpu_ms is not None:
            return (f"rank {self.rank}'s step records were held back in the rank (or made up): {self.held} of its "
                    f"{self.steps} step records reached the parent between two of its samples on {self.cpu_ms:.0f} ms "
                    f"of the rank's CPU, under {CPU_FLOOR_MS:g} ms a step where an honest step costs 2 ms and more, "
                    "so they were not sent as their steps ran")
        return (f"rank {self.rank}'s step records were held back in the rank: its record of step {self.step} reached "
                f"the parent {self.lag_s:.1f} s after {self.what} of step {self.later_step} had (made after step "
                f"{self.step} ended, and sent after it), and {self.held} of its {self.steps} step records came more than "
                f"{HELD_S:g} s late so")


def _attempt(rec: dict[str, Any]) -> int | None:
    a = rec.get("attempt", rec.get("a"))
    return a if type(a) is int else None


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def cheap_steps(received: list[float], samples: list[tuple[float, float]]) -> tuple[int, float, float | None]:
    """Of the step records received at ``received`` (the parent's times), those that arrived in an
    interval between two samples ``(t, cpu_s)`` on less than ``CPU_FLOOR_MS`` of CPU each: how many,
    the CPU those intervals held (s), and when the first such interval began."""
    pts = sorted(samples)
    received = sorted(received)
    cheap, cpu, first = 0, 0.0, None
    for (t0, c0), (t1, c1) in zip(pts, pts[1:]):
        n = bisect_right(received, t1) - bisect_right(received, t0)
        if n and (c1 - c0) * 1000 < CPU_FLOOR_MS * n:
            cheap, cpu = cheap + n, cpu + max(c1 - c0, 0.0)
            first = t0 if first is None else first
    return cheap, cpu, first


def held_back(ev: RunEvidence, rank: int) -> Held | None:
    """The rank's last attempt's step records against its other records, on the parent's clock,
    then (a CPU run) against the rank's CPU as the parent sampled it; None where nothing was held
    back, or the run had no record channel."""
    found = _out_of_order(ev, rank)
    if found is None and not ev.ranks[rank].cuda_alloc_mb:
        found = _unworked(ev, rank)
    return found


def _last_steps(ev: RunEvidence, rank: int) -> tuple[int, list[dict[str, Any]]]:
    """The rank's last attempt and its step records that carry a step number and a receive time."""
    steps = [e for e in ev.events(rank) if e.get("kind") == "step" and _attempt(e) is not None]
    if not steps:
        return 0, []
    last = max(a for e in steps if (a := _attempt(e)) is not None)
    return last, [e for e in steps if _attempt(e) == last and type(e.get("step")) is int
                  and _num(e.get("rt")) is not None]


def arrivals(ev: RunEvidence, rank: int) -> list[float]:
    """When the parent received the step records of the rank's last attempt, in order."""
    return sorted(float(e["rt"]) for e in _last_steps(ev, rank)[1])


def against_reference(ev: RunEvidence, ref: RunEvidence | None, rank: int) -> Held | None:
    """A burst no sample of the parent's falls in: the rank's step records all arrived within a
    small fraction of the time the reference run's took (the same workload, run by the same
    parent), so nothing placed them on the time their steps ran. Only where the reference's arrived
    over at least ``MIN_REF_SPAN_S`` (long enough to be sampled)."""
    if ref is None or not ev.sandboxed or not ref.sandboxed or rank not in ref.ranks:
        return None
    mine, theirs = arrivals(ev, rank), arrivals(ref, rank)
    if len(mine) < MIN_CHEAP_STEPS or len(theirs) < MIN_CHEAP_STEPS:
        return None
    span, ref_span = mine[-1] - mine[0], theirs[-1] - theirs[0]
    # per step: a run that stopped early (a crash, a hang) made fewer steps, not faster ones
    if ref_span < MIN_REF_SPAN_S or span / (len(mine) - 1) * SPAN_RATIO >= ref_span / (len(theirs) - 1):
        return None
    return Held(rank, 0, 0.0, "", 0, len(mine), len(mine),
                pace_ms=(round(span / (len(mine) - 1) * 1000, 3), round(ref_span / (len(theirs) - 1) * 1000, 3)))


def _unworked(ev: RunEvidence, rank: int) -> Held | None:
    last, steps = _last_steps(ev, rank)
    if not steps:
        return None
    samples = [(t, c) for s in ev.proc_samples(rank) if s.get("a") == last
               and (t := _num(s.get("t"))) is not None and (c := _num(s.get("cpu_s"))) is not None]
    cheap, cpu, first = cheap_steps([float(e["rt"]) for e in steps], samples)
    if cheap < MIN_CHEAP_STEPS or first is None:
        return None
    step = min((int(e["step"]) for e in steps if float(e["rt"]) > first), default=int(steps[0]["step"]))
    return Held(rank, step, 0.0, "", step, cheap, len(steps), cpu_ms=round(cpu * 1000, 3))


def _out_of_order(ev: RunEvidence, rank: int) -> Held | None:
    if not ev.sandboxed:
        return None
    events = ev.events(rank)
    last, steps = _last_steps(ev, rank)
    if not steps:
        return None
    # the earliest arrival of a record carrying each step number, per source
    first: dict[int, tuple[float, str]] = {}

    def note(step: Any, rt: Any, what: str) -> None:
        t = _num(rt)
        if type(step) is not int or t is None:
            return
        if step not in first or t < first[step][0]:
            first[step] = (t, what)

    for e in events:
        if e.get("kind") != "step" and _attempt(e) == last:
            note(e.get("step"), e.get("rt"), f"a {e.get('kind')} event")
    for c in ev.collective_records(rank):
        if _attempt(c) == last:
            note(c.get("step"), c.get("rt"), "the collective trace")
    for s in ev.save_records.get(rank, []):
        if _attempt(s) == last:
            note(s.get("step"), s.get("rt"), "the save trace")
    for s in rundir.read_records(rundir.rank_dir(ev.run_dir, rank) / rundir.SAMPLES, ev.key).valid:
        if _attempt(s) == last:
            note(s.get("s"), s.get("rt"), "the sample ledger")
    if not first:
        return None
    # for each step k: the earliest arrival of any record of step k or later (a suffix minimum)
    by_step: dict[int, tuple[float, str, int]] = {}
    best: tuple[float, str, int] | None = None
    for k in sorted(first, reverse=True):
        t, what = first[k]
        if best is None or t < best[0]:
            best = (t, what, k)
        by_step[k] = best
    keys = sorted(by_step)
    worst: tuple[float, dict[str, Any], tuple[float, str, int]] | None = None
    held = 0
    for e in steps:
        k = e["step"]
        # the smallest step number noted at or after k
        i = _bisect(keys, k)
        if i >= len(keys):
            continue
        earliest = by_step[keys[i]]
        lag = float(e["rt"]) - earliest[0]
        if lag > HELD_S:
            held += 1
            if worst is None or lag > worst[0]:
                worst = (lag, e, earliest)
    if worst is None:
        return None
    lag, e, (_, what, later) = worst
    return Held(rank, int(e["step"]), round(lag, 3), what, later, held, len(steps))


def _bisect(keys: list[int], k: int) -> int:
    from bisect import bisect_left

    return bisect_left(keys, k)
