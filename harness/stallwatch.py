"""Gathering what ``harness.stall`` classifies, while a job makes no progress: each rank's open
collectives (the end of its trace), its main thread's state (/proc), and, for a rank outside any
collective, the line it is at (its faulthandler stacks).

Only the end of each trace is read: a stall writes no records, so the file does not grow while it
lasts and is read once per stall, never followed record by record while the job runs (a job
issues thousands of collectives a second; verifying each record in the parent would cost its share
of the cores the ranks use). A collective entered before the last ``TAIL_BYTES`` and never seen
complete is not seen: one that old is an ``async_op`` never waited on, not where the rank waits.

Stacks are asked for (SIGUSR1, which the bootstrap's faulthandler answers, restarting the system
call it interrupted) once per stall, and only from ranks outside any collective: the ranks waiting
in one are at its call site already. Never from a process whose SIGUSR1 is not caught: there the
signal's default action would end it.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import rundir, threadstate
from harness.observe import parse_stacks
from harness.stall import OUTSIDE, RankFacts, view
from harness.threadstate import ThreadState

# About 440 collective records (DDP's, signed): the one a rank waits in is among the last few. Read
# and verified in 4-12 ms here at load 5 (256 KiB took 52 ms), once per rank per stall; a look after
# that costs a stat of the file and three small /proc reads, about 0.2 ms per rank.
TAIL_BYTES = 64 * 1024
STACK_SIGNAL = signal.SIGUSR1


class StallWatch:
    def __init__(self, run_dir: Path, key: str | None,
                 threads: Callable[[int], ThreadState | None] = threadstate.read,
                 send: Callable[[int, int], None] = os.kill):
        self.run_dir = run_dir
        self.key = key
        self.threads = threads  # injectable: tests script what /proc shows
        self.send = send
        self._tails: dict[int, tuple[tuple[int, int], list[dict[str, Any]]]] = {}  # rank -> ((size, attempt), open)
        self._asked: dict[int, list[int]] = {}  # rank -> [stacks.txt size when asked, its size at the last look]
        self._sites: dict[int, str | None] = {}

    def fill(self, facts: RankFacts, pid: int | None, attempt: int) -> RankFacts:
        """``facts`` with the rank's open collectives, its thread's state and, once its stack has
        come, its line."""
        if facts.exited:
            return facts
        facts.open = self.open_collectives(facts.rank, attempt)
        facts.thread = self.threads(pid) if pid is not None else None
        facts.site = self._site(facts.rank)
        return facts

    def ask_stacks(self, facts: list[RankFacts], pids: dict[int, int]) -> None:
        """Ask each rank outside a collective for its stacks, once per stall."""
        for f in facts:
            pid = pids.get(f.rank)
            if pid is None or f.rank in self._asked or view(f).state != OUTSIDE or not catches(pid, STACK_SIGNAL):
                continue
            size = _size(self._stacks(f.rank))
            self._asked[f.rank] = [size, size]
            try:
                self.send(pid, STACK_SIGNAL)
            except ProcessLookupError:
                pass

    def new_stall(self) -> None:
        """Progress resumed: the next stall asks again."""
        self._asked.clear()
        self._sites.clear()

    def open_collectives(self, rank: int, attempt: int) -> list[dict[str, Any]]:
        path = rundir.rank_dir(self.run_dir, rank) / rundir.COLLECTIVES
        size = _size(path)
        cached = self._tails.get(rank)
        if cached and cached[0] == (size, attempt):
            return cached[1]
        entered: dict[int, dict[str, Any]] = {}
        for line in _tail_lines(path, size):
            rec = rundir.verified(line, self.key) if self.key else _unverified(line)
            if rec is None or rec.get("a") != attempt or "seq" not in rec:
                continue
            if rec.get("ph") == "enter":
                entered[rec["seq"]] = rec
            elif rec.get("ph") in ("exit", "error"):
                entered.pop(rec["seq"], None)
        open_ = [entered[s] for s in sorted(entered)]
        self._tails[rank] = ((size, attempt), open_)
        return open_

    def _site(self, rank: int) -> str | None:
        if rank in self._sites:
            return self._sites[rank]
        if rank not in self._asked:
            return None
        asked = self._asked[rank]
        size = _size(self._stacks(rank))
        grew, asked[1] = size != asked[1], size
        dump = _read_from(self._stacks(rank), asked[0])
        # Complete once the main thread's stack (it runs the bootstrap) is in, or the dump stopped
        # growing between two looks; until then, look again at the next one.
        if not dump or ("harness/bootstrap.py" not in dump and grew):
            return None
        site: str | None = parse_stacks(dump)["site"]
        # A dump that held still between two looks may still be half-written (a rank descheduled
        # inside its signal handler on a loaded machine: CI saw one stay at no line for 20 s): only
        # a line found is kept; no line yet is read again at the next look.
        if site is not None:
            self._sites[rank] = site
        return site

    def _stacks(self, rank: int) -> Path:
        return rundir.rank_dir(self.run_dir, rank) / rundir.STACKS


def catches(pid: int, sig: int) -> bool:
    """Whether the process has a handler for ``sig`` (``SigCgt`` in /proc/<pid>/status)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _tail_lines(path: Path, size: int) -> list[bytes]:
    try:
        with open(path, "rb") as f:
            f.seek(max(size - TAIL_BYTES, 0))
            chunk = f.read(TAIL_BYTES)
    except OSError:
        return []
    lines = chunk.split(b"\n")
    if size > TAIL_BYTES:
        lines = lines[1:]  # the first is cut
    return [ln for ln in lines[:-1] if ln.strip()]  # the last is a record still being written, or ""


def _unverified(line: bytes) -> dict[str, Any] | None:
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_from(path: Path, offset: int) -> str:
    try:
        with open(path, errors="replace") as f:
            f.seek(offset)
            return f.read()
    except OSError:
        return ""
