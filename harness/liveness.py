"""Is a rank working? Its CPU time, read by the parent from /proc, never reported by the rank.

A rank evaluating on its own (rank 0 of nanoGPT's ``estimate_loss`` while rank 1 waits in the next
collective) writes no record for as long as the evaluation runs, but its CPU time grows at up to a
core per second. A rank blocked in a gloo collective uses next to none: measured on the 2-core
machine, a rank waiting in ``all_reduce`` and one in a rank-0-only ``barrier`` used 0.01 and 0.03
CPU-s over 10 s (0.1-0.3% of a core; psutil reads /proc in 10 ms ticks, so a single 1 s sample
reads 0 or 1 tick, 0-1%), see ``tests/harness/test_liveness.py``. So a rank counts as working when
its process and its live descendants (DataLoader workers, looked for every ``TREE_S``) used at
least ``BUSY_FRACTION`` of a core since the previous sample: 10x the highest idle reading of a 1 s sample, and a fraction a
computing rank exceeds even when five jobs share the machine's two cores.

Not covered: a host thread that spins while it waits (CUDA's default schedule spins in a device
synchronisation when there are fewer CUDA contexts than cores) looks like work; on such a machine
a deadlock inside an NCCL collective is ended by NCCL's own timeout or ``--timeout``, not by
``--hang-timeout`` (not measured: no GPU machine was available).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import psutil

BUSY_FRACTION = 0.10  # of one core, over one sample interval
SAMPLE_S = 1.0  # how often each rank's CPU time is read (one /proc file per process)
TREE_S = 5.0  # how often each rank's descendants are looked for (a scan of all of /proc: ~7 ms per rank here)


class Liveness(Protocol):
    """What the monitor asks of a source of outside evidence that ranks are working."""

    busy_fraction: float  # a rank at or above this fraction of a core is working

    def sample(self, pids: dict[int, int], now: float) -> dict[int, float]:
        """``{rank: fraction of a core used since its previous sample}``, for the ranks sampled now."""
        ...


@dataclass
class _Tree:
    cpu: dict[int, float] = field(default_factory=dict)  # pid -> user+system CPU-s at the last read
    at: float = 0.0


class CpuWatch:
    """CPU time per rank process tree, sampled at most every ``sample_s``."""

    def __init__(self, busy_fraction: float = BUSY_FRACTION, sample_s: float = SAMPLE_S, tree_s: float = TREE_S):
        self.busy_fraction = busy_fraction
        self.sample_s = sample_s
        self.tree_s = tree_s
        self._trees: dict[int, _Tree] = {}  # by rank pid
        self._procs: dict[int, psutil.Process] = {}
        self._family: dict[int, tuple[float, list[psutil.Process]]] = {}  # rank pid -> (when, descendants)

    def sample(self, pids: dict[int, int], now: float) -> dict[int, float]:
        out = {}
        for rank, pid in pids.items():
            tree = self._trees.get(pid)
            if tree is not None and now - tree.at < self.sample_s:
                continue
            cpu = self._read(pid, now)
            if tree is None or not cpu:
                self._trees[pid] = _Tree(cpu, now)
                continue
            # Only processes seen in both reads: a worker's CPU is counted while it runs, not again
            # when its parent reaps it, and a new process contributes from its second read on.
            used = sum(max(c - tree.cpu[p], 0.0) for p, c in cpu.items() if p in tree.cpu)
            frac = used / max(now - tree.at, 1e-6)
            self._trees[pid] = _Tree(cpu, now)
            out[rank] = frac
        for pid in set(self._trees) - set(pids.values()):  # ranks that ended
            self._trees.pop(pid, None)
            self._procs.pop(pid, None)
            self._family.pop(pid, None)
        return out

    def _read(self, pid: int, now: float) -> dict[int, float]:
        proc = self._procs.get(pid)
        try:
            if proc is None:
                proc = self._procs[pid] = psutil.Process(pid)
            when, kids = self._family.get(pid, (None, []))
            if when is None or now - when >= self.tree_s:
                kids = proc.children(recursive=True)
                self._family[pid] = (now, kids)
            procs = [proc, *kids]
        except psutil.Error:
            return {}
        out = {}
        for p in procs:
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            out[p.pid] = t.user + t.system
        return out
