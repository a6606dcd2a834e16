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

What this cannot see: a script that holds back every stream alike (all its records, from every
process), keeping their order; then only the parent's samples of the rank (its CPU time while no
record arrives) would tell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness import rundir

if TYPE_CHECKING:
    from grader.evidence import RunEvidence

HELD_S = 1.0


@dataclass(frozen=True)
class Held:
    rank: int
    step: int  # the step whose record came latest after a later step's record
    lag_s: float  # how long after that record it arrived
    what: str  # the later record: "the collective trace", "the save trace", "the sample ledger", "a <kind> event"
    later_step: int  # the step number that record carried
    held: int  # step records that came more than HELD_S after a record of their step or later
    steps: int  # step records of the attempt

    def sentence(self) -> str:
        return (f"rank {self.rank}'s step records were held back in the rank: its record of step {self.step} reached "
                f"the parent {self.lag_s:.1f} s after {self.what} of step {self.later_step} had (made after step "
                f"{self.step} ended, and sent after it), and {self.held} of its {self.steps} step records came more than "
                f"{HELD_S:g} s late so")


def _attempt(rec: dict[str, Any]) -> int | None:
    a = rec.get("attempt", rec.get("a"))
    return a if type(a) is int else None


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def held_back(ev: RunEvidence, rank: int) -> Held | None:
    """The rank's last attempt's step records against its other records, on the parent's clock;
    None where nothing was held back, or the run had no record channel."""
    if not ev.sandboxed:
        return None
    events = ev.events(rank)
    steps = [e for e in events if e.get("kind") == "step" and _attempt(e) is not None]
    if not steps:
        return None
    last = max(a for e in steps if (a := _attempt(e)) is not None)
    steps = [e for e in steps if _attempt(e) == last and type(e.get("step")) is int and _num(e.get("rt")) is not None]
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
