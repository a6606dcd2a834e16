"""Live progress of a launch, read incrementally from the run dir while it runs.

This is for the display and the hang watchdog only: it reads records without verifying them
(the key stays with the parent until the end) and keeps parent-clock times of each change.
Grading always re-reads the finished run dir with verification (``harness.observe``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from harness import rundir

RATE_WINDOW_S = 5.0  # steps/s on the display: over the last few seconds, so a stall shows as 0


@dataclass
class RankProgress:
    rank: int
    attempt: int = 0
    pid: int | None = None
    steps: int = 0
    rss_mb: float = 0.0
    peak_rss_mb: float = 0.0
    steps_per_s: float = 0.0
    exited: bool = False
    exit_status: str | None = None  # from the exit record; "killed" when the process died without one
    history: deque = field(default_factory=deque)  # (parent time, steps) per poll, for steps/s

    def update_rate(self, now: float) -> None:
        h = self.history
        if h and self.steps < h[-1][1]:  # a new attempt started counting again
            h.clear()
        h.append((now, self.steps))
        while len(h) > 2 and h[1][0] <= now - RATE_WINDOW_S:
            h.popleft()
        t0, s0 = h[0]
        self.steps_per_s = (self.steps - s0) / (now - t0) if now > t0 else 0.0


@dataclass
class Snapshot:
    elapsed_s: float
    attempt: int
    ranks: list[RankProgress]
    since_progress_s: float
    phase: str  # "startup" (no step yet in this attempt) or "running"


class Monitor:
    def __init__(self, run_dir: Path, startup_timeout: float, hang_timeout: float,
                 tee: Callable[[int, str, str], None] | None = None):
        self.run_dir = run_dir
        self.tee = tee  # called with (rank, "stdout"|"stderr", line) for each new line of output
        self._out_offsets: dict[Path, int] = {}
        self.startup_timeout = startup_timeout
        self.hang_timeout = hang_timeout
        self.started = time.time()
        self.ranks: dict[int, RankProgress] = {}
        self._offsets: dict[int, int] = {}
        self._sizes: dict[Path, int] = {}
        self.attempt = 0
        self.attempt_started = self.started
        self.last_progress = self.started
        self.stepped_this_attempt = False

    def poll(self, now: float | None = None) -> Snapshot:
        now = now or time.time()
        for r in rundir.ranks_in(self.run_dir):
            self._read_events(r, now)
            self.ranks[r].update_rate(now)
            if self.tee:
                self._tee_output(r)
            rdir = rundir.rank_dir(self.run_dir, r)
            for name in (rundir.SAMPLES, rundir.COLLECTIVES):
                p = rdir / name
                try:
                    size = p.stat().st_size
                except FileNotFoundError:
                    continue
                if size != self._sizes.get(p, 0):
                    self._sizes[p] = size
                    self.last_progress = now
        self._check_alive(now)
        return self.snapshot(now)

    def _check_alive(self, now: float) -> None:
        """Ranks that died without an exit record (SIGKILL, a segfault) are not waited on; once
        every rank of this attempt has ended while the launcher goes on, it is restarting them, and
        the next attempt gets the start-up allowance, not the hang timeout."""
        current = [p for p in self.ranks.values() if p.attempt == self.attempt and p.pid is not None]
        for p in current:
            if not p.exited and not _running(p.pid):
                p.exited, p.exit_status = True, "killed"
                self.last_progress = now
        if current and all(p.exited for p in current) and self.stepped_this_attempt:
            self.stepped_this_attempt = False
            self.attempt_started = now

    def _read_events(self, r: int, now: float) -> None:
        prog = self.ranks.setdefault(r, RankProgress(rank=r))
        path = rundir.rank_dir(self.run_dir, r) / rundir.EVENTS
        recs, self._offsets[r] = rundir.iter_new_lines(path, self._offsets.get(r, 0))
        for rec in recs:
            attempt = int(rec.get("attempt", 0))
            kind = rec.get("kind")
            if attempt > self.attempt:
                self.attempt, self.attempt_started = attempt, now
                self.stepped_this_attempt = False
            if kind in ("boot", "start"):  # boot: the interpreter is up; start: torch too, script next
                prog.attempt, prog.pid, prog.steps = attempt, rec.get("pid"), 0
                prog.exited, prog.exit_status = False, None
            elif kind == "step":
                prog.steps = int(rec.get("step", prog.steps + 1))
                prog.rss_mb = float(rec.get("rss_mb", 0.0))
                prog.peak_rss_mb = max(prog.peak_rss_mb, prog.rss_mb)
                if attempt == self.attempt:
                    self.stepped_this_attempt = True
            elif kind == "exit":
                prog.exited, prog.exit_status = True, rec.get("status")
            self.last_progress = now

    def _tee_output(self, r: int) -> None:
        for stream, name in (("stdout", rundir.STDOUT), ("stderr", rundir.STDERR)):
            path = rundir.rank_dir(self.run_dir, r) / name
            try:
                with open(path, "rb") as f:
                    f.seek(self._out_offsets.get(path, 0))
                    chunk = f.read()
            except FileNotFoundError:
                continue
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            self._out_offsets[path] = self._out_offsets.get(path, 0) + end + 1
            for line in chunk[:end].decode(errors="replace").split("\n"):
                self.tee(r, stream, line)

    def snapshot(self, now: float | None = None) -> Snapshot:
        now = now or time.time()
        return Snapshot(
            elapsed_s=now - self.started, attempt=self.attempt,
            ranks=[self.ranks[r] for r in sorted(self.ranks)],
            since_progress_s=now - self.last_progress,
            phase="running" if self.stepped_this_attempt else "startup",
        )

    def hung(self, now: float | None = None) -> bool:
        now = now or time.time()
        if not self.stepped_this_attempt:
            return now - max(self.attempt_started, self.last_progress) > self.startup_timeout
        return now - self.last_progress > self.hang_timeout

    def live_pids(self) -> dict[int, int]:
        return {r: p.pid for r, p in self.ranks.items()
                if p.pid is not None and p.attempt == self.attempt and not p.exited}


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
