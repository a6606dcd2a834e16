"""What the parent gathers during a stall: each rank's open collectives from the end of its trace
(signed records only), and the line a rank outside any collective is at, from the stack dump it
is asked for (never from a process that would die of the signal)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from harness import rundir, stallwatch, threadstate
from harness.stall import RankFacts
from harness.stallwatch import StallWatch, catches
from harness.threadstate import ThreadState

KEY = "k" * 32
SLEEPING = ThreadState("S", 230, "hrtimer_nanosleep", "sleeping")


def trace(tmp_path, rank, records):
    w = rundir.RecordWriter(rundir.rank_dir(tmp_path, rank) / rundir.COLLECTIVES, KEY)
    for rec in records:
        w.write(rec)


def enter(seq, a=0, **kw):
    return {"a": a, "seq": seq, "op": "all_reduce", "ph": "enter", "site": "/w/t.py:5", "async": False,
            "main": True, "t": 1.0, **kw}


def done(seq, a=0):
    return {"a": a, "seq": seq, "ph": "exit", "t": 1.0}


def test_open_collectives_of_this_attempt_from_the_traces_end(tmp_path, monkeypatch):
    monkeypatch.setattr(stallwatch, "TAIL_BYTES", 4096)
    old = [enter(1, a=0)]  # an earlier attempt's, never completed: not this attempt's
    early = [enter(2, a=1, **{"async": True})]  # open, but before the window: not seen
    busy = [r for s in range(3, 60) for r in (enter(s, a=1), done(s, a=1))]  # well over 4 KiB
    trace(tmp_path, 0, old + early + busy + [enter(60, a=1), enter(61, a=1), done(60, a=1)])
    with open(rundir.rank_dir(tmp_path, 0) / rundir.COLLECTIVES, "a") as f:  # forged: closes nothing
        f.write('{"a": 1, "seq": 61, "ph": "exit", "t": 2.0, "mac": "' + "0" * 32 + '"}\n')
        f.write('{"a": 1, "seq": 62, "ph": "en')  # a record still being written
    watch = StallWatch(tmp_path, KEY)
    assert [c["seq"] for c in watch.open_collectives(0, attempt=1)] == [61]
    assert [c["seq"] for c in watch.open_collectives(0, attempt=0)] == []  # attempt 0's enter is before the window


def test_a_short_trace_is_read_whole(tmp_path):
    trace(tmp_path, 1, [enter(1), done(1), enter(2, **{"async": True}), enter(3)])
    assert [c["seq"] for c in StallWatch(tmp_path, KEY).open_collectives(1, attempt=0)] == [2, 3]
    assert StallWatch(tmp_path, KEY).open_collectives(5, attempt=0) == []  # no trace at all


DUMPS_ON_USR1 = """
import faulthandler, signal, sys, time
faulthandler.register(signal.SIGUSR1, file=open(sys.argv[1], "a"), all_threads=True, chain=False)
print("ready", flush=True)
def upload():
    time.sleep(60)  # where the straggler is
upload()
"""


@pytest.fixture
def straggler(tmp_path):
    """A process that sleeps with faulthandler on SIGUSR1, as the bootstrap leaves a rank."""
    stacks = rundir.rank_dir(tmp_path, 0) / rundir.STACKS
    stacks.parent.mkdir(parents=True)
    script = tmp_path / "upload.py"
    script.write_text(DUMPS_ON_USR1)
    p = subprocess.Popen([sys.executable, str(script), str(stacks)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    deadline = time.time() + 10  # until it is in the sleep, not still on the line before it
    while time.time() < deadline and getattr(threadstate.read(p.pid), "doing", None) != "sleeping":
        time.sleep(0.02)
    yield p.pid, f"{script}:6"
    p.kill()
    p.wait()


def test_the_line_of_a_rank_outside_any_collective_comes_from_its_stack(tmp_path, straggler):
    pid, line = straggler
    watch = StallWatch(tmp_path, KEY, threads=lambda p: SLEEPING)
    facts = [watch.fill(RankFacts(0), pid, attempt=0)]
    assert catches(pid, signal.SIGUSR1) and facts[0].site is None
    watch.ask_stacks(facts, {0: pid})
    watch.ask_stacks(facts, {0: pid})  # once per stall
    deadline = time.time() + 20  # generous: the dump is written by the process, on a loaded machine
    while watch.fill(RankFacts(0), pid, attempt=0).site is None and time.time() < deadline:
        time.sleep(0.2)
    assert watch.fill(RankFacts(0), pid, attempt=0).site == line
    text = (rundir.rank_dir(tmp_path, 0) / rundir.STACKS).read_text()
    assert text.count("most recent call first") == 1  # one dump: asked once


def test_no_signal_where_it_would_end_the_process_nor_to_a_rank_in_a_collective(tmp_path, straggler):
    sent = []
    watch = StallWatch(tmp_path, KEY, threads=lambda p: SLEEPING, send=lambda pid, sig: sent.append(pid))
    sleeper = subprocess.Popen(["sleep", "60"])  # SIGUSR1's default action: it would die
    try:
        assert not catches(sleeper.pid, signal.SIGUSR1)
        trace(tmp_path, 1, [enter(4)])
        facts = [watch.fill(RankFacts(0), sleeper.pid, 0), watch.fill(RankFacts(1), straggler[0], 0)]
        watch.ask_stacks(facts, {0: sleeper.pid, 1: straggler[0]})
        assert sent == [] and sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_dump_that_paused_half_written_is_read_again_until_its_line_is_in(tmp_path, monkeypatch):
    """The rank can be descheduled inside its signal handler: two looks may see the same part."""
    stacks = rundir.rank_dir(tmp_path, 0) / rundir.STACKS
    stacks.parent.mkdir(parents=True)
    stacks.write_text("")
    watch = StallWatch(tmp_path, KEY, threads=lambda p: SLEEPING, send=lambda pid, sig: None)
    facts = [watch.fill(RankFacts(0), 1, attempt=0)]
    monkeypatch.setattr(stallwatch, "catches", lambda pid, sig: True)
    watch.ask_stacks(facts, {0: 1})
    with open(stacks, "a") as f:
        f.write("Current thread 0x00007f (most recent call first):\n")
    for _ in range(3):  # held still across looks, its frames not yet written
        assert watch.fill(RankFacts(0), 1, attempt=0).site is None
    with open(stacks, "a") as f:
        f.write('  File "/w/upload.py", line 6 in upload\n  File "/w/upload.py", line 7 in <module>\n')
    assert watch.fill(RankFacts(0), 1, attempt=0).site is None  # still growing at this look
    assert watch.fill(RankFacts(0), 1, attempt=0).site == "/w/upload.py:6"
