"""How long each optimizer step took, by the parent's clock where it can be had.

A step record's ``dt`` is measured in the rank, from a timestamp the script shares an address space
with: a script can reset it after a stall (the step then looks fast) or slow the clock the
instrumentation reads. Under the record channel the parent stamps every record with its own
receive time (``rt``), so the time between two consecutive step records' receive times is the
step as the parent saw it: nothing in the rank can shorten it without the rank sending its record
earlier, that is, without actually being done earlier. This is the clock steps/s already uses
(``harness.observe``). Where the run had no channel (an unsandboxed run) the rank's ``dt`` is all
there is.

The first step of an attempt has no earlier record to measure from; it keeps its ``dt`` (it is
warm-up, which the checks skip).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from grader.evidence import RunEvidence

PARENT: Literal["parent"] = "parent"
RANK: Literal["rank"] = "rank"


@dataclass(frozen=True)
class StepTimes:
    """Per step of a rank's last attempt, in step order: the step number and its duration (s)."""

    rank: int
    source: Literal["parent", "rank"]  # parent: receive times of the records; rank: the records' dt
    steps: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def step_times(ev: RunEvidence, rank: int) -> StepTimes:
    """The rank's step durations in its last attempt: differences of the parent's receive times
    when every step record carries one, else the rank's own ``dt``."""
    recs = [r for r in ev.events(rank) if r.get("kind") == "step"]
    last = max((int(r.get("attempt", 0)) for r in recs), default=0)
    recs = [r for r in recs if int(r.get("attempt", 0)) == last]
    steps = [int(r.get("step", i + 1)) for i, r in enumerate(recs)]
    if recs and all(isinstance(r.get("rt"), (int, float)) for r in recs):
        rts = [float(r["rt"]) for r in recs]
        secs = [float(recs[0].get("dt", 0.0))] + [max(0.0, b - a) for a, b in zip(rts, rts[1:])]
        return StepTimes(rank, PARENT, steps, secs)
    return StepTimes(rank, RANK, steps, [float(r.get("dt", 0.0)) for r in recs])
