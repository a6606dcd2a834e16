"""Live progress of a launch while it runs: for the display and the hang watchdog.

Progress is any new verified record of any rank (``harness.progress``), or a rank using CPU
(``harness.liveness``, read from /proc by the parent): a rank evaluating alone while its peers
wait in a collective is working, not hung. A job is hung only when no rank has made progress of
either kind for the hang timeout (or the start-up allowance, before the first step of an attempt).
Times are the parent's clock. Grading re-reads the finished run dir (``harness.observe``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from harness import rundir
from harness.liveness import CpuWatch, Liveness
from harness.progress import RecordFeed, RunDirFeed

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
    last_record_at: float | None = None  # parent time of its last verified record
    busy_until: float | None = None  # parent time of the last CPU sample that showed it working
    cpu_fraction: float | None = None  # of a core, in its last CPU sample
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
    def __init__(self, run_dir: Path, startup_timeout: float, hang_timeout: float, key: str,
                 tee: Callable[[int, str, str], None] | None = None,
                 feed: RecordFeed | None = None, liveness: Liveness | None = None):
        self.run_dir = run_dir
        self.tee = tee  # called with (rank, "stdout"|"stderr", line) for each new line of output
        self._out_offsets: dict[Path, int] = {}
        self.startup_timeout = startup_timeout
        self.hang_timeout = hang_timeout
        self.feed = feed if feed is not None else RunDirFeed(run_dir, key)
        self.liveness = liveness if liveness is not None else CpuWatch()
        self.started = time.time()
        self.ranks: dict[int, RankProgress] = {}
        self.attempt = 0
        self.attempt_started = self.started
        self.last_progress = self.started
        self.progress_by = "start"  # what the last progress was: "record (rank N)", "CPU (rank N)"
        self.stepped_this_attempt = False

    def poll(self, now: float | None = None) -> Snapshot:
        now = now or time.time()
        for r, streams in sorted(self.feed.poll().items()):
            prog = self.ranks.setdefault(r, RankProgress(rank=r))
            self._read_events(prog, streams.get(rundir.EVENTS, []), now)
            if any(streams.values()):
                prog.last_record_at = now
                self._progress(now, f"record (rank {r})")
        for r, prog in self.ranks.items():
            prog.update_rate(now)
            if self.tee:
                self._tee_output(r)
        self._check_alive(now)
        for r, frac in sorted(self.liveness.sample(self.live_pids(), now).items()):
            self.ranks[r].cpu_fraction = frac
            if frac >= self.liveness.busy_fraction:
                self.ranks[r].busy_until = now
                self._progress(now, f"CPU (rank {r})")
        return self.snapshot(now)

    def _progress(self, now: float, by: str) -> None:
        self.last_progress = max(self.last_progress, now)
        self.progress_by = by

    def _check_alive(self, now: float) -> None:
        """Ranks that died without an exit record (SIGKILL, a segfault) are not waited on; once
        every rank of this attempt has ended while the launcher goes on, it is restarting them, and
        the next attempt gets the start-up allowance, not the hang timeout."""
        current = [p for p in self.ranks.values() if p.attempt == self.attempt and p.pid is not None]
        for p in current:
            if not p.exited and not _running(p.pid):
                p.exited, p.exit_status = True, "killed"
                self._progress(now, f"exit (rank {p.rank})")
        if current and all(p.exited for p in current) and self.stepped_this_attempt:
            self.stepped_this_attempt = False
            self.attempt_started = now

    def _read_events(self, prog: RankProgress, recs: list[dict], now: float) -> None:
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
