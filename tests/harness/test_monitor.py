"""Live progress from a run dir being written: the display's rates, ranks that die without an exit
record, restarts, and when the watchdog ends a job: a deadlock at the hang timeout, a straggler
only at the stall limit. Hand-written records, scripted CPU readings and scripted /proc thread
states; the ranks' pids are two idle ``sleep`` processes. Time is passed in, so nothing here
depends on the machine's speed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from harness import rundir
from harness.monitor import Monitor
from harness.stall import DEADLOCK, NO_PROGRESS, STRAGGLER
from harness.stallwatch import StallWatch
from harness.threadstate import FUTEX, ThreadState

KEY = "k" * 32
SLEEPING = ThreadState("S", 230, "hrtimer_nanosleep", "sleeping")
LOCKED = ThreadState("S", 202, "futex_do_wait", FUTEX)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


class Ranks:
    """Appends records to ranks/<r>/events.jsonl and collectives.jsonl the way the bootstrap does."""

    def __init__(self, run_dir, pids):
        self.run_dir = run_dir
        self.pids = pids  # a live process per rank, for the monitor to watch
        self.writers = {}

    def _writer(self, rank, name):
        if (rank, name) not in self.writers:
            self.writers[rank, name] = rundir.RecordWriter(rundir.rank_dir(self.run_dir, rank) / name, KEY)
        return self.writers[rank, name]

    def write(self, rank, kind, attempt=0, **fields):
        self._writer(rank, rundir.EVENTS).write({"kind": kind, "attempt": attempt, "t": time.time(), **fields})

    def start(self, *ranks, attempt=0, kind="start"):
        for r in ranks:
            self.write(r, kind, attempt, pid=self.pids[r])

    def steps(self, rank, first, last, attempt=0):
        for s in range(first, last + 1):
            self.write(rank, "step", attempt, step=s, rss_mb=100.0 + s, dt=0.01)

    def enter(self, rank, seq, op="all_reduce", attempt=0, **fields):
        rec = {"a": attempt, "seq": seq, "op": op, "ph": "enter", "site": f"/w/train.py:{10 + seq}",
               "async": False, "main": True, "t": time.time(), **fields}
        self._writer(rank, rundir.COLLECTIVES).write(rec)

    def exit(self, rank, seq, attempt=0):
        self._writer(rank, rundir.COLLECTIVES).write({"a": attempt, "seq": seq, "ph": "exit", "t": time.time()})


class Cpu:
    """Scripted CPU readings: ``fractions[rank]`` is what every later sample of that rank reads."""

    busy_fraction = 0.1

    def __init__(self):
        self.fractions: dict[int, float] = {}

    def sample(self, pids, now):
        return {r: self.fractions.get(r, 0.0) for r in pids}


class Threads:
    """Scripted /proc: what each pid's main thread reads as; the signals the watch would send."""

    def __init__(self):
        self.by_pid: dict[int, ThreadState] = {}
        self.sent: list[tuple[int, int]] = []

    def __call__(self, pid):
        return self.by_pid.get(pid, LOCKED)

    def send(self, pid, sig):
        self.sent.append((pid, sig))


@pytest.fixture(scope="module")
def pids():
    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(3)]
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def job(tmp_path, pids):
    threads = Threads()
    mon = Monitor(tmp_path, startup_timeout=60, hang_timeout=10, key=KEY, liveness=Cpu(), world_size=2,
                  stallwatch=StallWatch(tmp_path, KEY, threads=threads, send=threads.send))
    mon.threads = threads
    return mon, Ranks(tmp_path, pids)


def deadlocked(ranks, first_step=2):
    """Both ranks stepped, then rank 0 entered a barrier alone while rank 1 waits in an all_reduce."""
    ranks.start(0, 1)
    for r in (0, 1):
        ranks.steps(r, 1, first_step)
    ranks.enter(0, 7, "barrier")
    ranks.enter(1, 7, "all_reduce")


def test_steps_per_s_is_recent_and_falls_to_zero_when_a_rank_stalls(job):
    mon, ranks = job
    t = time.time()
    ranks.start(0)
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
    ranks.start(0)
    ranks.write(1, "start", pid=dead_pid())
    ranks.steps(0, 1, 3)
    ranks.steps(1, 1, 3)
    snap = mon.poll()
    assert [(r.exited, r.exit_status) for r in snap.ranks] == [(False, None), (True, "killed")]
    assert mon.live_pids() == {0: ranks.pids[0]}


def test_an_exit_record_is_kept_once_the_process_is_gone(job):
    mon, ranks = job
    ranks.write(0, "start", pid=dead_pid())
    ranks.write(0, "exit", status="exception", code=1)
    assert [(r.exited, r.exit_status) for r in mon.poll().ranks] == [(True, "exception")]


def test_a_deadlock_is_hung_at_the_hang_timeout(job):
    mon, ranks = job
    t = time.time()
    deadlocked(ranks)
    mon.poll(t)
    assert mon.snapshot(t).phase == "running" and mon.stall is None
    mon.poll(t + 1)  # a second without progress: the first look
    assert mon.stall.kind == DEADLOCK and mon.snapshot(t + 1).stall is None  # not news before the hang timeout
    mon.poll(t + 9.9)
    assert not mon.hung(t + 9.9) and mon.snapshot(t + 9.9).stall is None
    mon.poll(t + 10.1)
    assert mon.hung(t + 10.1) and mon.ended_by(t + 10.1) == "hang timeout"
    assert mon.snapshot(t + 10.1).stall.kind == DEADLOCK
    assert mon.threads.sent == []  # ranks waiting in a collective are at its call site: no signal needed


def test_a_straggler_is_reported_and_left_to_the_stall_limit(job):
    """Rank 0 sleeps outside any collective (its last one completed) while rank 1 waits in DDP's
    bucket all-reduce: the job goes on past the hang timeout, until the process group's timeout."""
    mon, ranks = job
    t = time.time()
    ranks.start(0, 1)
    ranks.write(0, "pg_init", backend="gloo", timeout_s=100.0)
    for r in (0, 1):
        ranks.steps(r, 1, 3)
        ranks.enter(r, 5)
        ranks.exit(r, 5)
    ranks.enter(1, 6, **{"async": True})
    mon.threads.by_pid[ranks.pids[0]] = SLEEPING
    mon.poll(t)
    for dt in range(1, 130):
        mon.poll(t + dt)
        assert not mon.hung(t + dt), dt
    assert mon.stall.kind == STRAGGLER
    assert mon.stall_limit() == 100.0 + 30.0  # the process group's timeout, plus the margin
    snap = mon.snapshot(t + 129)
    assert snap.stall.kind == STRAGGLER and [v.doing for v in snap.stall.ranks] == ["sleeping", None]
    # the straggler (only it) was asked for its stack: a sleep process does not catch SIGUSR1, so none was sent
    assert mon.threads.sent == []
    mon.poll(t + 130.5)
    assert mon.hung(t + 130.5) and mon.ended_by(t + 130.5) == "stall limit"


def test_a_straggler_that_comes_back_is_kept_as_a_stall_the_job_went_on_from(job):
    mon, ranks = job
    t = time.time()
    ranks.start(0, 1)
    for r in (0, 1):
        ranks.steps(r, 1, 3)
    ranks.enter(1, 6)
    mon.threads.by_pid[ranks.pids[0]] = SLEEPING
    mon.poll(t)
    mon.poll(t + 5)  # shorter than the hang timeout: not kept
    ranks.steps(0, 4, 4)
    mon.poll(t + 6)
    assert mon.stalls == [] and mon.stall is None
    for dt in range(7, 48):
        mon.poll(t + dt)
    ranks.exit(1, 6)  # rank 0 came back and joined the all_reduce
    ranks.steps(0, 5, 5)
    mon.poll(t + 48)
    assert mon.stall is None and len(mon.stalls) == 1
    ep = mon.stalls[0]
    assert ep["kind"] == STRAGGLER and ep["ended_by"] == "progress" and ep["lasted_s"] == pytest.approx(42.0)
    assert ep["started_at"] == pytest.approx(t + 6) and ep["reported_at"] == pytest.approx(t + 16)
    assert ep["summary"][0] == "straggler: rank 1 waits in a collective for rank 0, which is outside any collective"


def test_a_straggler_that_turns_into_a_deadlock_gets_the_hang_timeout_from_then(job):
    """Rank 0 sleeps with an async all_reduce open, then waits on it (no record: its wait is not
    traced) while rank 1 waits in another collective: a deadlock only from the moment /proc shows it."""
    mon, ranks = job
    t = time.time()
    ranks.start(0, 1)
    for r in (0, 1):
        ranks.steps(r, 1, 3)
    ranks.enter(0, 6, **{"async": True})
    ranks.enter(1, 6, "barrier")
    mon.threads.by_pid[ranks.pids[0]] = SLEEPING
    mon.poll(t)
    for dt in range(1, 31):
        mon.poll(t + dt)
    assert mon.stall.kind == STRAGGLER and not mon.hung(t + 30)
    mon.threads.by_pid[ranks.pids[0]] = LOCKED
    mon.poll(t + 31)
    assert mon.stall.kind == DEADLOCK
    mon.poll(t + 40.9)
    assert not mon.hung(t + 40.9)
    mon.poll(t + 41.1)
    assert mon.hung(t + 41.1)


def test_nothing_at_all_is_left_to_the_stall_limit(job):
    mon, ranks = job
    t = time.time()
    ranks.start(0, 1)
    for r in (0, 1):
        ranks.steps(r, 1, 3)
    mon.stall_timeout = 50  # the user's own, shorter than the process group's
    mon.poll(t)
    for dt in range(1, 51):
        mon.poll(t + dt)
        assert not mon.hung(t + dt)
    assert mon.stall.kind == NO_PROGRESS
    mon.poll(t + 50.5)
    assert mon.ended_by(t + 50.5) == "stall limit"


def test_a_peer_that_exited_while_the_other_waits_is_a_deadlock(job):
    mon, ranks = job
    t = time.time()
    ranks.start(0, 1)
    for r in (0, 1):
        ranks.steps(r, 1, 3)
    ranks.write(0, "exit", status="ok", code=0)
    ranks.enter(1, 6)
    mon.poll(t)
    mon.poll(t + 10.5)
    assert mon.stall.kind == DEADLOCK and mon.hung(t + 10.5)


def test_a_deadlock_before_the_first_step_gets_the_startup_allowance(job):
    mon, ranks = job
    t = time.time()
    ranks.start(0, 1)
    ranks.enter(0, 1, "barrier")
    ranks.enter(1, 1)
    mon.poll(t)
    for dt in range(1, 60):
        mon.poll(t + dt)
        assert not mon.hung(t + dt)
    assert mon.stall.kind == DEADLOCK
    mon.poll(t + 60.5)
    assert mon.ended_by(t + 60.5) == "start-up allowance"


def test_before_the_first_step_a_stall_is_news_only_after_the_startup_allowance(job):
    """The launcher importing torch, a rank downloading its data while the other waits in a
    barrier: no record and no CPU for a while is the start-up's ordinary course."""
    mon, ranks = job
    t = time.time()
    mon.poll(t)  # no rank has booted yet
    for dt in range(1, 60):
        assert mon.poll(t + dt).stall is None
    assert mon.stall.kind == NO_PROGRESS and mon.stalls == []
    assert mon.poll(t + 60).stall.kind == NO_PROGRESS and len(mon.stalls) == 1
    assert not mon.hung(t + 60)


@pytest.mark.parametrize("stream", [rundir.COLLECTIVES, rundir.SAMPLES, rundir.SAVES, rundir.EVENTS])
def test_any_signed_record_is_progress(job, tmp_path, stream):
    mon, ranks = job
    t = time.time()
    deadlocked(ranks)
    mon.poll(t)
    with open(rundir.rank_dir(tmp_path, 0) / stream, "a") as f:  # e.g. an eval loop's all_reduce
        f.write(rundir.sign({"a": 0, "seq": 1, "ph": "enter"}, KEY) + "\n")
    mon.poll(t + 8)
    mon.poll(t + 8 + 9.9)
    assert not mon.hung(t + 8 + 9.9)
    mon.poll(t + 8 + 10.1)
    assert mon.hung(t + 8 + 10.1)
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
    deadlocked(ranks)
    mon.poll(t)
    with open(rundir.rank_dir(tmp_path, 0) / stream, "a") as f:
        f.write(junk)
    mon.poll(t + 8)
    mon.poll(t + 10.1)
    assert mon.hung(t + 10.1) and mon.ranks[0].steps == 2
    assert mon.feed.rejected == 1


def test_a_forged_exit_does_not_take_a_rank_out_of_its_collective(job, tmp_path):
    """Only signed records count in the trace's end too: a line the script appends cannot turn a
    deadlock into a straggler left to run for half an hour."""
    mon, ranks = job
    t = time.time()
    deadlocked(ranks)
    with open(rundir.rank_dir(tmp_path, 0) / rundir.COLLECTIVES, "a") as f:
        f.write('{"a": 0, "seq": 7, "ph": "exit", "t": 1.0, "mac": "' + "0" * 32 + '"}\n')
    mon.poll(t)
    mon.poll(t + 10.1)
    assert mon.stall.kind == DEADLOCK and mon.hung(t + 10.1)


def test_a_rank_using_cpu_is_progress_and_an_idle_one_is_not(job):
    """Rank 0 evaluates alone (CPU, no records) while rank 1 waits: not hung until rank 0 stops."""
    mon, ranks = job
    t = time.time()
    deadlocked(ranks)
    mon.poll(t)
    mon.liveness.fractions = {0: 0.95, 1: 0.002}  # measured idle gloo waits read 0-0.01
    for dt in range(1, 30):
        mon.poll(t + dt)
        assert not mon.hung(t + dt)
    assert mon.ranks[0].busy_until == t + 29 and mon.ranks[1].busy_until is None
    assert mon.ranks[1].cpu_fraction == 0.002 and mon.progress_by == "CPU (rank 0)"
    mon.liveness.fractions = {0: 0.05, 1: 0.0}  # below the threshold: waiting, not working
    mon.poll(t + 30)
    mon.poll(t + 29 + 9.9)
    assert not mon.hung(t + 29 + 9.9)
    mon.poll(t + 29 + 10.1)
    assert mon.hung(t + 29 + 10.1)


def test_cpu_counts_during_startup_too(job):
    mon, ranks = job
    t = time.time()
    ranks.start(0, 1, kind="boot")  # importing torch: seconds of CPU, no record
    ranks.enter(0, 1, "barrier")
    ranks.enter(1, 1)
    mon.poll(t)
    mon.liveness.fractions = {0: 1.0}
    mon.poll(t + 59)
    mon.liveness.fractions = {}
    mon.poll(t + 61)
    assert not mon.hung(t + 61)
    mon.poll(t + 59 + 60.1)
    assert mon.hung(t + 59 + 60.1)


def test_a_restart_gets_the_startup_allowance_again(job):
    mon, ranks = job
    t = time.time()
    for r in (0, 1):
        ranks.write(r, "start", pid=dead_pid())  # both ranks of attempt 0 have died: torchrun restarts
        ranks.steps(r, 1, 5)
    snap = mon.poll(t)
    assert snap.phase == "startup" and snap.attempt == 0
    ranks.start(0, 1, attempt=1)
    ranks.enter(0, 1, "barrier", attempt=1)
    ranks.enter(1, 1, attempt=1)
    snap = mon.poll(t + 20)
    assert snap.attempt == 1 and snap.phase == "startup" and snap.ranks[0].steps == 0
    mon.poll(t + 21)
    assert mon.stall.kind == DEADLOCK
    mon.poll(t + 79)
    assert not mon.hung(t + 79)
    mon.poll(t + 80.5)
    assert mon.hung(t + 80.5)
    ranks.steps(0, 1, 1, attempt=1)
    assert mon.poll(t + 81).phase == "running"


def test_a_rank_is_watched_from_its_boot_record_before_torch_is_imported(job):
    mon, ranks = job
    ranks.start(0, kind="boot")
    ranks.write(1, "boot", pid=dead_pid())  # died while importing torch
    snap = mon.poll()
    assert snap.phase == "startup" and mon.live_pids() == {0: ranks.pids[0]}
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
