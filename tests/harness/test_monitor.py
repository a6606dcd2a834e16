"""Live progress from a run dir being written: the display's rates, ranks that die without an exit
record, restarts, and when the watchdog calls a job hung. Hand-written records and scripted CPU
readings, no processes launched: time is passed in, so nothing here depends on the machine's speed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from harness import rundir
from harness.monitor import Monitor

KEY = "k" * 32


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


class Ranks:
    """Appends records to ranks/<r>/events.jsonl the way the bootstrap does."""

    def __init__(self, run_dir):
        self.run_dir = run_dir
        self.writers = {}

    def write(self, rank, kind, attempt=0, **fields):
        if rank not in self.writers:
            self.writers[rank] = rundir.RecordWriter(rundir.rank_dir(self.run_dir, rank) / rundir.EVENTS, KEY)
        self.writers[rank].write({"kind": kind, "attempt": attempt, "t": time.time(), **fields})

    def steps(self, rank, first, last, attempt=0):
        for s in range(first, last + 1):
            self.write(rank, "step", attempt, step=s, rss_mb=100.0 + s, dt=0.01)


class Cpu:
    """Scripted CPU readings: ``fractions[rank]`` is what every later sample of that rank reads."""

    busy_fraction = 0.1

    def __init__(self):
        self.fractions: dict[int, float] = {}

    def sample(self, pids, now):
        return {r: self.fractions.get(r, 0.0) for r in pids}


@pytest.fixture
def job(tmp_path):
    return Monitor(tmp_path, startup_timeout=60, hang_timeout=10, key=KEY, liveness=Cpu()), Ranks(tmp_path)


def test_steps_per_s_is_recent_and_falls_to_zero_when_a_rank_stalls(job):
    mon, ranks = job
    t = time.time()
    ranks.write(0, "start", pid=subprocess.os.getpid())
    mon.poll(t)
    ranks.steps(0, 1, 10)
    snap = mon.poll(t + 1)
    assert snap.ranks[0].steps == 10 and snap.ranks[0].steps_per_s == pytest.approx(10.0)
    assert snap.ranks[0].rss_mb == 110.0 and snap.phase == "running"
    ranks.steps(0, 11, 20)
    assert mon.poll(t + 2).ranks[0].steps_per_s == pytest.approx(10.0)
    assert mon.poll(t + 4).ranks[0].steps_per_s == pytest.approx(5.0)  # 20 steps in 4 s
    assert mon.poll(t + 9).ranks[0].steps_per_s == 0.0  # nothing in the last 5 s


def test_rank_dead_without_exit_record_is_marked_killed_and_not_signalled(job):
    mon, ranks = job
    ranks.write(0, "start", pid=subprocess.os.getpid())
    ranks.write(1, "start", pid=dead_pid())
    ranks.steps(0, 1, 3)
    ranks.steps(1, 1, 3)
    snap = mon.poll()
    assert [(r.exited, r.exit_status) for r in snap.ranks] == [(False, None), (True, "killed")]
    assert mon.live_pids() == {0: subprocess.os.getpid()}


def test_an_exit_record_is_kept_once_the_process_is_gone(job):
    mon, ranks = job
    ranks.write(0, "start", pid=dead_pid())
    ranks.write(0, "exit", status="exception", code=1)
    assert [(r.exited, r.exit_status) for r in mon.poll().ranks] == [(True, "exception")]


def test_hang_timeout_applies_once_a_step_is_done(job):
    mon, ranks = job
    t = time.time()
    ranks.write(0, "start", pid=subprocess.os.getpid())
    assert not mon.hung(t + 30)  # start-up: 60 s allowance
    assert mon.hung(t + 61)
    ranks.steps(0, 1, 2)
    mon.poll(t + 1)
    assert mon.snapshot(t + 1).phase == "running"
    assert not mon.hung(t + 1 + 9.9) and mon.hung(t + 1 + 10.1)


@pytest.mark.parametrize("stream", [rundir.COLLECTIVES, rundir.SAMPLES, rundir.SAVES, rundir.EVENTS])
def test_any_signed_record_is_progress(job, tmp_path, stream):
    mon, ranks = job
    t = time.time()
    ranks.write(0, "start", pid=subprocess.os.getpid())
    ranks.steps(0, 1, 2)
    mon.poll(t)
    with open(rundir.rank_dir(tmp_path, 0) / stream, "a") as f:  # e.g. an eval loop's all_reduce
        f.write(rundir.sign({"a": 0, "seq": 1, "ph": "enter"}, KEY) + "\n")
    mon.poll(t + 8)
    assert not mon.hung(t + 8 + 9.9) and mon.hung(t + 8 + 10.1)
    assert mon.progress_by == "record (rank 0)"


@pytest.mark.parametrize("junk", [
    "not json at all\n",
    '{"kind": "step", "attempt": 0, "step": 3}\n',  # plausible, unsigned
    rundir.sign({"kind": "step", "attempt": 0, "step": 3}, "not-the-key") + "\n",
    '{"a": 0, "seq": 9, "ph": "enter", "mac": "' + "0" * 32 + '"}\n',
])
@pytest.mark.parametrize("stream", [rundir.EVENTS, rundir.COLLECTIVES, rundir.SAMPLES])
def test_lines_the_script_appends_are_not_progress(job, tmp_path, junk, stream):
    mon, ranks = job
    t = time.time()
    ranks.write(0, "start", pid=subprocess.os.getpid())
    ranks.steps(0, 1, 2)
    mon.poll(t)
    with open(rundir.rank_dir(tmp_path, 0) / stream, "a") as f:
        f.write(junk)
    mon.poll(t + 8)
    assert mon.hung(t + 10.1) and mon.ranks[0].steps == 2
    assert mon.feed.rejected == 1


def test_a_rank_using_cpu_is_progress_and_an_idle_one_is_not(job):
    """Rank 0 evaluates alone (CPU, no records) while rank 1 waits: not hung until rank 0 stops."""
    mon, ranks = job
    t = time.time()
    for r in (0, 1):
        ranks.write(r, "start", pid=subprocess.os.getpid())
        ranks.steps(r, 1, 3)
    mon.poll(t)
    mon.liveness.fractions = {0: 0.95, 1: 0.002}  # measured idle gloo waits read 0-0.01
    for dt in range(1, 30):
        mon.poll(t + dt)
        assert not mon.hung(t + dt)
    assert mon.ranks[0].busy_until == t + 29 and mon.ranks[1].busy_until is None
    assert mon.ranks[1].cpu_fraction == 0.002 and mon.progress_by == "CPU (rank 0)"
    mon.liveness.fractions = {0: 0.05, 1: 0.0}  # below the threshold: waiting, not working
    mon.poll(t + 30)
    assert not mon.hung(t + 29 + 9.9) and mon.hung(t + 29 + 10.1)


def test_cpu_counts_during_startup_too(job):
    mon, ranks = job
    t = time.time()
    ranks.write(0, "boot", pid=subprocess.os.getpid())  # importing torch: seconds of CPU, no record
    mon.poll(t)
    mon.liveness.fractions = {0: 1.0}
    mon.poll(t + 59)
    assert not mon.hung(t + 61) and mon.hung(t + 59 + 60.1)


def test_a_restart_gets_the_startup_allowance_again(job):
    mon, ranks = job
    t = time.time()
    for r in (0, 1):
        ranks.write(r, "start", pid=dead_pid())  # both ranks of attempt 0 have died: torchrun restarts
        ranks.steps(r, 1, 5)
    snap = mon.poll(t)
    assert snap.phase == "startup" and snap.attempt == 0
    assert not mon.hung(t + 30) and mon.hung(t + 61)
    for r in (0, 1):
        ranks.write(r, "start", attempt=1, pid=subprocess.os.getpid())
    snap = mon.poll(t + 20)
    assert snap.attempt == 1 and snap.phase == "startup" and snap.ranks[0].steps == 0
    ranks.steps(0, 1, 1, attempt=1)
    assert mon.poll(t + 21).phase == "running"


def test_a_rank_is_watched_from_its_boot_record_before_torch_is_imported(job):
    mon, ranks = job
    ranks.write(0, "boot", pid=subprocess.os.getpid())
    ranks.write(1, "boot", pid=dead_pid())  # died while importing torch
    snap = mon.poll()
    assert snap.phase == "startup" and mon.live_pids() == {0: subprocess.os.getpid()}
    assert [r.exit_status for r in snap.ranks] == [None, "killed"]


def test_feed_reads_every_event_but_only_the_newest_valid_record_of_other_streams(tmp_path):
    from harness.progress import RunDirFeed

    rdir = rundir.rank_dir(tmp_path, 0)
    ledger = rundir.RecordWriter(rdir / rundir.SAMPLES, KEY)
    events = rundir.RecordWriter(rdir / rundir.EVENTS, KEY)
    for i in range(1000):
        ledger.write({"a": 0, "ds": "train", "i": i, "s": 0})
    for s in range(1, 4):
        events.write({"kind": "step", "attempt": 0, "step": s})
    with open(rdir / rundir.SAMPLES, "a") as f:
        f.write("junk the script appended\n")
    feed = RunDirFeed(tmp_path, KEY)
    got = feed.poll()[0]
    assert [r["step"] for r in got[rundir.EVENTS]] == [1, 2, 3]
    assert [r["i"] for r in got[rundir.SAMPLES]] == [999]  # enough to know there was progress
    assert feed.rejected == 1 and feed.poll() == {0: {}}  # nothing new
