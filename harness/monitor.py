"""Live progress of a launch while it runs: for the display and the hang watchdog.

Progress is any new verified record of any rank (``harness.progress``), or a rank using CPU
(``harness.liveness``, read from /proc by the parent): a rank evaluating alone while its peers
wait in a collective is working, not hung. Once no rank has made progress of either kind for a
second, the monitor looks at what they are doing (``harness.stall``: each rank's open collectives
and its main thread in /proc) and tells a deadlock from a straggler:

- a deadlock (every rank waits in a collective, for peers that wait in another or are gone) is
  hung once it has held for the hang timeout (the start-up allowance, before the first step of an
  attempt): it cannot complete, and the process group would end it with an error anyway;
- a straggler (a rank outside any collective while others wait for it) and no progress at all
  (no rank in a collective) are reported once they have lasted the same allowance, and the job goes
  on: only the stall limit ends them, by default no shorter than the process group's own timeout
  (``pg_init``'s, 30 min on gloo and 10 min on NCCL unless the script sets another), past which
  torch would have ended the waiting ranks itself.

Times are the parent's clock. Grading re-reads the finished run dir (``harness.observe``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from harness import defaults, rundir
from harness.liveness import CpuWatch, Liveness
from harness.progress import RecordFeed, RunDirFeed
from harness.stall import DEADLOCK, RankFacts, Stall, classify
from harness.stallwatch import StallWatch

RATE_WINDOW_S = 5.0  # steps/s on the display: over the last few seconds, so a stall shows as 0
# No progress for this long: look at what the ranks are doing, and again every LOOK_EVERY_S while it
# lasts (a look reads three small /proc files per rank; each trace's end once per stall).
LOOK_AFTER_S = 1.0
LOOK_EVERY_S = 1.0


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
    marked: dict | None = None  # the fault event of this attempt: the rank waits to be killed (harness.injector)
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
    stall: Stall | None = None  # what the ranks do, once no progress has lasted the allowance
    stall_limit_s: float = 0.0  # no progress for this long ends the job, whatever the ranks do


class Monitor:
    def __init__(self, run_dir: Path, startup_timeout: float, hang_timeout: float, key: str,
                 tee: Callable[[int, str, str], None] | None = None,
                 feed: RecordFeed | None = None, liveness: Liveness | None = None,
                 world_size: int | None = None, stall_timeout: float | None = None,
                 stallwatch: StallWatch | None = None):
        self.run_dir = run_dir
        self.tee = tee  # called with (rank, "stdout"|"stderr", line) for each new line of output
        self._out_offsets: dict[Path, int] = {}
        self.startup_timeout = startup_timeout
        self.hang_timeout = hang_timeout
        self.stall_timeout = stall_timeout  # None: from the process group's timeout (stall_limit)
        self.world_size = world_size  # None: the ranks seen are the whole job
        self.pg_timeout_s: float | None = None  # the largest any rank's pg_init reported
        self.feed = feed if feed is not None else RunDirFeed(run_dir, key)
        self.liveness = liveness if liveness is not None else CpuWatch()
        self.stallwatch = stallwatch if stallwatch is not None else StallWatch(run_dir, key)
        self.stall: Stall | None = None  # the last look, while no progress lasts
        self.stall_since = 0.0  # since when the stall has been what it is now
        self._looked_at = 0.0
        self.stalls: list[dict] = []  # every stall that lasted the allowance, oldest first
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
        self._look(now)
        return self.snapshot(now)

    def _progress(self, now: float, by: str) -> None:
        self.last_progress = max(self.last_progress, now)
        self.progress_by = by
        if self.stall is not None:
            self.end_stall(now, "progress")

    # -- stalls ---------------------------------------------------------------------------------
    def _look(self, now: float) -> None:
        since = now - self.last_progress
        if since < min(LOOK_AFTER_S, self.hang_timeout):
            return
        if self.stall is not None and now - self._looked_at < LOOK_EVERY_S:
            return
        self._looked_at = now
        current = [p for p in self.ranks.values() if p.attempt == self.attempt]
        facts = [self.stallwatch.fill(self._facts(p, now), p.pid, self.attempt) for p in current]
        stall = classify(facts, self.world_size or len(facts))
        if self.stall is None or stall.key != self.stall.key:
            # the first look of a stall dates it from the last progress; a later change from now
            self.stall_since = self.last_progress if self.stall is None else now
        self.stall = stall
        if since >= self.allowance():
            self.stallwatch.ask_stacks(facts, self.live_pids())
            if not self.stalls or self.stalls[-1].get("ended_at") is not None:
                self.stalls.append({"started_at": round(self.last_progress, 3), "reported_at": round(now, 3),
                                    "ended_at": None, "ended_by": None})
            self.stalls[-1].update(stall.to_json(), lasted_s=round(since, 2))

    def _facts(self, p: RankProgress, now: float) -> RankFacts:
        heard = max((t for t in (p.last_record_at, p.busy_until) if t is not None), default=None)
        return RankFacts(rank=p.rank, exited=p.exited, exit_status=p.exit_status, last_step=p.steps,
                         quiet_s=None if heard is None else now - heard)

    def end_stall(self, now: float, by: str) -> None:
        """Progress resumed (``by`` "progress"), or the run ended while a stall lasted."""
        if self.stalls and self.stalls[-1].get("ended_at") is None:
            ep = self.stalls[-1]
            ep.update(ended_at=round(now, 3), ended_by=by, lasted_s=round(now - ep["started_at"], 2))
        self.stall = None
        self.stallwatch.new_stall()

    def allowance(self) -> float:
        """How long a stall must last to be news, and a deadlock to be hung: the hang timeout, or
        the start-up allowance before the first step of an attempt (imports, the launcher's own
        start, data set up and NCCL's first collective write no record and may use no CPU)."""
        return self.hang_timeout if self.stepped_this_attempt else self.startup_timeout

    def reported_stall(self, now: float | None = None) -> Stall | None:
        """The stall, once it has lasted the allowance (shorter ones are not news)."""
        now = now or time.time()
        return self.stall if self.stall is not None and now - self.last_progress >= self.allowance() else None

    def stall_limit(self) -> float:
        """No progress for this long ends the job, whatever the ranks do: the user's limit, else
        the process group's own timeout (past it the waiting ranks time out in torch) plus a
        margin, so that torch's own error is the one the user sees; never below the allowances."""
        if self.stall_timeout is not None:
            return self.stall_timeout
        pg = self.pg_timeout_s if self.pg_timeout_s is not None else defaults.PG_TIMEOUT_S
        return max(pg + defaults.STALL_MARGIN_S, self.allowance())

    def ended_by(self, now: float | None = None) -> str | None:
        """Why the job is to be ended now, or None: "hang timeout" or "start-up allowance" (a
        deadlock held that long), or "stall limit" (no progress of any kind for that long)."""
        now = now or time.time()
        if now - self.last_progress > self.stall_limit():
            return "stall limit"
        s = self.stall
        if s is None or s.kind != DEADLOCK:
            return None
        name = "hang timeout" if self.stepped_this_attempt else "start-up allowance"
        return name if now - max(self.stall_since, self.last_progress) > self.allowance() else None

    def hung(self, now: float | None = None) -> bool:
        return self.ended_by(now) is not None

    def _check_alive(self, now: float) -> None:
        """Ranks that died without an exit record (SIGKILL, a segfault) are not waited on; once
        every rank of this attempt has ended while the launcher goes on, it is restarting them, and
        the next attempt gets the start-up allowance, not the hang timeout."""
        current = [p for p in self.ranks.values() if p.attempt == self.attempt and p.pid is not None]
        for p in current:
            if not p.exited and p.pid is not None and not _running(p.pid):
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
                prog.exited, prog.exit_status, prog.marked = False, None, None
            elif kind == "fault":
                prog.marked = rec
            elif kind == "step":
                prog.steps = int(rec.get("step", prog.steps + 1))
                prog.rss_mb = float(rec.get("rss_mb", 0.0))
                prog.peak_rss_mb = max(prog.peak_rss_mb, prog.rss_mb)
                if attempt == self.attempt:
                    self.stepped_this_attempt = True
            elif kind == "exit":
                prog.exited, prog.exit_status = True, rec.get("status")
            elif kind == "pg_init" and isinstance(rec.get("timeout_s"), (int, float)):
                self.pg_timeout_s = max(self.pg_timeout_s or 0.0, float(rec["timeout_s"]))

    def _tee_output(self, r: int) -> None:
        tee = self.tee
        if tee is None:  # (its caller checks: nothing to copy the output to)
            return
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
                tee(r, stream, line)

    def snapshot(self, now: float | None = None) -> Snapshot:
        now = now or time.time()
        return Snapshot(
            elapsed_s=now - self.started, attempt=self.attempt,
            ranks=[self.ranks[r] for r in sorted(self.ranks)],
            since_progress_s=now - self.last_progress,
            phase="running" if self.stepped_this_attempt else "startup",
            stall=self.reported_stall(now), stall_limit_s=self.stall_limit(),
        )

    def live_pids(self) -> dict[int, int]:
        return {r: p.pid for r, p in self.ranks.items()
                if p.pid is not None and p.attempt == self.attempt and not p.exited}


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
