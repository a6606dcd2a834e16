"""Kill faults performed by the parent, from outside the ranks.

A grading role that kills a rank (``resume``: after a step; ``resume_save``: half-way through a
checkpoint write) must not depend on code in the candidate's process to do the killing: a script
that removes that code would never be killed, and could pass off anything it likes as a restart.
So the rank only marks the point. The bootstrap's hook (``harness.instrument``) sends a ``fault``
event when the rank reaches it (after the step; after half the checkpoint's bytes reached the
disk) and then waits; the parent reads the event and SIGKILLs the rank's whole process tree, a
checkpoint writer it forked and its DataLoader workers included, as a lost machine would take them.

Enforced whatever the rank does: a ``step`` fault whose rank is seen past its step (a step record
of a later step in the faulted attempt) without having marked it is killed there and then, and the
kill says it came late (``overdue``): the hook was bypassed. A ``save`` fault whose rank never
reaches a checkpoint write is never killed; the checks that need that restart fail it for that.

Which process is the rank is the channel server's attribution (the real pid of the process that
sent the attempt's ``boot``/``start``, ``harness.channel_server``); which attempt it is in, the
process's launch environment. Each kill is recorded in ``run.json`` (``faults_injected``), with the
parent's time and the step it had seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import psutil


class FaultPlan(Protocol):
    rank: int
    step: int
    attempt: int
    when: str


class RankView(Protocol):
    """What the monitor knows of a rank (``harness.monitor.RankProgress``)."""

    attempt: int
    pid: int | None
    steps: int
    exited: bool
    marked: dict[str, Any] | None


@dataclass(frozen=True)
class Kill:
    rank: int
    attempt: int
    when: str  # the plan's: step | save
    planned_step: int
    seen_step: int  # the last step the parent had seen from the rank when it killed it
    pid: int
    killed: int  # processes sent SIGKILL: the rank and its descendants
    t: float  # the parent's clock
    how: str  # "marked": at the point the rank reported; "overdue": past its step without reporting it
    path: str | None = None  # a save fault: the file whose write was torn, as the rank reported it

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def kill_tree(pid: int) -> int:
    """SIGKILL ``pid`` and every descendant (collected first, so none is orphaned out of reach)."""
    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.Error:
        return 0
    n = 0
    for p in procs:
        try:
            p.kill()
            n += 1
        except psutil.Error:
            pass
    return n


class FaultInjector:
    """Polled by the launcher after the monitor, with the monitor's ranks."""

    def __init__(self, plans: Sequence[FaultPlan], kill: Callable[[int], int] = kill_tree,
                 clock: Callable[[], float] = time.time):
        self.pending = list(plans)
        self.done: list[Kill] = []
        self._kill, self._clock = kill, clock

    def poll(self, ranks: Mapping[int, RankView]) -> list[Kill]:
        fired = []
        for plan in list(self.pending):
            p = ranks.get(plan.rank)
            if p is None or p.pid is None or p.attempt != plan.attempt or p.exited:
                continue
            marked = p.marked if p.marked is not None and p.marked.get("attempt") == plan.attempt else None
            if marked is not None:
                how = "marked"
            elif plan.when == "step" and p.steps > plan.step:
                how = "overdue"
            else:
                continue
            n = self._kill(p.pid)
            k = Kill(rank=plan.rank, attempt=plan.attempt, when=plan.when, planned_step=plan.step,
                     seen_step=p.steps, pid=p.pid, killed=n, t=round(self._clock(), 6), how=how,
                     path=(marked or {}).get("path"))
            self.pending.remove(plan)
            self.done.append(k)
            fired.append(k)
        return fired

    def settle(self, events: Callable[[int], list[dict[str, Any]]]) -> list[Kill]:
        """After the run, every record in (a sandboxed run's channel drained): a step fault whose
        rank went past its step without marking it and ended between two polls, before the parent
        could kill it (a disarmed hook in a job of a few hundred steps a second), is recorded as
        ``overdue`` with nothing killed. The restart checks then see no kill (``killed == 0``) and
        the flag says the hook was bypassed. ``events(rank)``: the rank's verified event records."""
        missed = []
        for plan in [p for p in self.pending if p.when == "step"]:
            recs = [r for r in events(plan.rank) if _attempt(r) == plan.attempt]
            if any(r.get("kind") == "fault" for r in recs):
                continue
            steps = [r["step"] for r in recs if r.get("kind") == "step" and type(r.get("step")) is int]
            if not steps or max(steps) <= plan.step:
                continue
            pid = next((r["pid"] for r in recs if r.get("kind") in ("start", "boot") and type(r.get("pid")) is int), 0)
            k = Kill(rank=plan.rank, attempt=plan.attempt, when=plan.when, planned_step=plan.step,
                     seen_step=max(steps), pid=pid, killed=0, t=round(self._clock(), 6), how="overdue")
            self.pending.remove(plan)
            self.done.append(k)
            missed.append(k)
        return missed

    def to_json(self) -> list[dict[str, Any]]:
        return [k.to_json() for k in self.done]


def _attempt(rec: dict[str, Any]) -> int | None:
    a = rec.get("attempt", rec.get("a"))
    return a if type(a) is int else None
