"""Checkpoint writes the step loop waited for, from the save trace.

A periodic stall is fixed when the step loop no longer waits for checkpoint I/O, not when the wait
got shorter: moving only the upload off the loop and keeping ``torch.save`` of the whole state in it
leaves a stall whose length is the disk's and the machine's load's (on a quiet machine with a fast
disk it may even hide under the step-time bound, and on the brief's 100 GB job it is minutes). The
trace says which thread made every write (``main``) and how many optimizer steps were done when it
began, so the writes made on the training thread between two steps are known whatever the clock.

Only checkpoint-sized writes count: a ``torch.save``, file copy, DCP file or artifact-store upload
of at least ``MIN_SHARE_OF_LARGEST`` of the largest one the rank made (a metrics file written in the
loop is not the checkpoint). Renames are not writes of bytes. The write that follows the last step
(the final checkpoint, after the loop) is not in the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grader.evidence.saves import FileOp
from grader.evidence.steptimes import StepTimes

if TYPE_CHECKING:
    from grader.evidence import RunEvidence

MIN_SHARE_OF_LARGEST = 0.5
BYTE_WRITES = ("save", "copy", "write", "bytes", "upload")


@dataclass(frozen=True)
class LoopWrites:
    """One rank's checkpoint-sized writes on the training thread inside its last attempt's loop."""

    rank: int
    writes: list[FileOp] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)  # the steps they ran in, each once, in order
    write_s: float = 0.0  # the writes' own durations, summed
    step_s: float = 0.0  # the durations of the steps they ran in, summed (the clock of ``StepTimes``)

    @property
    def share(self) -> float:
        """The share of those steps' time the writes took."""
        return min(1.0, self.write_s / self.step_s) if self.step_s > 0 else 0.0


def loop_writes(ev: RunEvidence, rank: int, times: StepTimes) -> LoopWrites:
    ops = [o for o in [*ev.file_ops, *ev.file_uploads] if o.rank == rank and o.op in BYTE_WRITES and o.completed]
    if not ops or not times.steps:
        return LoopWrites(rank)
    attempt = max(o.attempt for o in ops)
    largest = max((o.bytes or 0) for o in ops)
    last_step = times.steps[-1]
    found = [o for o in ops if o.attempt == attempt and o.main and 1 <= o.step < last_step
             and (o.bytes or 0) >= MIN_SHARE_OF_LARGEST * largest]
    if not found:
        return LoopWrites(rank)
    # a write that began after step s was done ran inside step s + 1
    dur = dict(zip(times.steps, times.seconds))
    steps = sorted({o.step + 1 for o in found})
    return LoopWrites(rank, found, steps, sum(float(o.dur or 0.0) for o in found),
                      sum(dur.get(s, 0.0) for s in steps))
