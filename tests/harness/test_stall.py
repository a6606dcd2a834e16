"""Telling a deadlock from a straggler and from no progress at all, from the facts the parent
gathers (each rank's open collectives, its main thread in /proc, its line): pure functions, no
processes."""

from __future__ import annotations

import pytest

from harness.stall import (
    DEADLOCK,
    EXITED,
    IN_COLLECTIVE,
    NO_PROGRESS,
    OUTSIDE,
    STRAGGLER,
    UNSEEN,
    RankFacts,
    classify,
    summary,
    view,
)
from harness.threadstate import FUTEX, ThreadState

SLEEPING = ThreadState("S", 230, "hrtimer_nanosleep", "sleeping")
READING = ThreadState("S", 0, "pipe_read", "reading", "a pipe")
LOCKED = ThreadState("S", 202, "futex_do_wait", FUTEX)
DISK = ThreadState("D", 0, "nfs_wait", "in uninterruptible I/O (state D: disk or network filesystem)")
BARRIER = {"op": "barrier", "seq": 7, "site": "/w/train.py:19", "async": False, "main": True}
ALL_REDUCE = {"op": "all_reduce", "seq": 7, "site": "/w/train.py:17", "async": False, "main": True}
BUCKET = {"op": "all_reduce", "seq": 9, "site": "/w/train.py:54", "async": True, "main": True}  # DDP's, from C++
SIDE = {"op": "all_reduce", "seq": 8, "site": "/w/train.py:30", "async": False, "main": False}  # another thread's


@pytest.mark.parametrize("facts, state", [
    (RankFacts(0, open=[BARRIER], thread=LOCKED), IN_COLLECTIVE),
    (RankFacts(0, open=[BUCKET], thread=LOCKED), IN_COLLECTIVE),
    (RankFacts(0, open=[BARRIER], thread=None), IN_COLLECTIVE),  # /proc unreadable: the trace decides
    # a synchronous call on the main thread has not returned, whatever /proc reads meanwhile
    (RankFacts(0, open=[BARRIER], thread=READING), IN_COLLECTIVE),
    # async (DDP's buckets) or another thread's: open, but the main thread is elsewhere
    (RankFacts(0, open=[BUCKET], thread=SLEEPING), OUTSIDE),
    (RankFacts(0, open=[BUCKET], thread=DISK), OUTSIDE),
    (RankFacts(0, open=[SIDE], thread=READING), OUTSIDE),
    (RankFacts(0, open=[], thread=SLEEPING), OUTSIDE),
    (RankFacts(0, open=[], thread=LOCKED), OUTSIDE),  # a lock, a queue, a join: no collective is open
    (RankFacts(0, open=[], thread=None), OUTSIDE),
    (RankFacts(0, exited=True, exit_status="ok", open=[BARRIER]), EXITED),
])
def test_where_a_rank_is(facts, state):
    assert view(facts).state == state


def test_the_main_threads_collective_is_the_one_waited_in():
    v = view(RankFacts(0, open=[BUCKET, SIDE], thread=LOCKED))
    assert v.state == IN_COLLECTIVE and v.collective["seq"] == 9 and v.site == "/w/train.py:54"


@pytest.mark.parametrize("facts, world, kind, whole", [
    ([RankFacts(0, open=[BARRIER], thread=LOCKED), RankFacts(1, open=[ALL_REDUCE], thread=LOCKED)], 2, DEADLOCK, True),
    ([RankFacts(0, open=[BARRIER], thread=LOCKED), RankFacts(1, exited=True, exit_status="ok")], 2, DEADLOCK, True),
    ([RankFacts(0, thread=SLEEPING), RankFacts(1, open=[BUCKET], thread=LOCKED)], 2, STRAGGLER, True),
    ([RankFacts(0, open=[BUCKET], thread=SLEEPING), RankFacts(1, open=[BUCKET], thread=LOCKED)], 2, STRAGGLER, True),
    # a rank not started, or on another node, may be the one the others wait for
    ([RankFacts(0, open=[BARRIER], thread=LOCKED)], 2, STRAGGLER, False),
    ([RankFacts(0, thread=SLEEPING), RankFacts(1, thread=READING)], 2, NO_PROGRESS, True),
    ([RankFacts(0, exited=True), RankFacts(1, exited=True)], 2, NO_PROGRESS, True),
    ([], 2, NO_PROGRESS, False),
])
def test_kinds(facts, world, kind, whole):
    stall = classify(facts, world)
    assert (stall.kind, stall.whole_world) == (kind, whole)
    assert [v.rank for v in stall.ranks] == list(range(world))


@pytest.mark.parametrize("facts, world, lines", [
    ([RankFacts(0, open=[BARRIER], thread=LOCKED, quiet_s=15.2), RankFacts(1, open=[ALL_REDUCE], thread=LOCKED)], 2, [
        "deadlock: rank 0 waits in barrier #7 (called at w/train.py:19); rank 1 waits in all_reduce #7 "
        "(called at w/train.py:17): each waits for a peer that is in another collective",
        "rank 0 waits in barrier #7 (called at w/train.py:19) for 15.2 s",
        "rank 1 waits in all_reduce #7 (called at w/train.py:17)",
    ]),
    ([RankFacts(0, open=[BARRIER], thread=LOCKED), RankFacts(1, exited=True, exit_status="ok")], 2, [
        "deadlock: rank 0 waits in a collective for rank 1, which has exited",
        "rank 0 waits in barrier #7 (called at w/train.py:19)",
        "rank 1 has exited (ok)",
    ]),
    ([RankFacts(0, thread=SLEEPING, site="/w/train.py:31", quiet_s=40.0),
      RankFacts(1, open=[BUCKET], thread=LOCKED, quiet_s=39.9)], 2, [
        "straggler: rank 1 waits in a collective for rank 0, which is outside any collective",
        "rank 0 is outside any collective at w/train.py:31, sleeping for 40.0 s",
        "rank 1 waits in all_reduce #9 (called at w/train.py:54) for 39.9 s",
    ]),
    ([RankFacts(0, open=[BUCKET], thread=READING)], 2, [
        "no progress at all: no rank waits in a collective and none uses CPU",
        "rank 0 is outside any collective, reading a pipe, with all_reduce #9 issued and not waited on",
        "rank 1 was never seen by this launcher (another node's, or not started)",
    ]),
])
def test_summary_says_who_waits_for_whom(facts, world, lines):
    assert summary(classify(facts, world)) == lines


def test_one_node_of_two_cannot_call_a_deadlock():
    """Every rank this launcher sees waits in a collective, but ranks 0 and 1 run on another node,
    where one may be outside every collective: not a deadlock, so never ended at the hang timeout."""
    stall = classify([RankFacts(2, open=[BARRIER], thread=LOCKED), RankFacts(3, open=[BARRIER], thread=LOCKED)], 4)
    assert (stall.kind, stall.whole_world) == (STRAGGLER, False)
    assert [(v.rank, v.state) for v in stall.ranks] == [(0, UNSEEN), (1, UNSEEN), (2, IN_COLLECTIVE), (3, IN_COLLECTIVE)]
    assert summary(stall)[0] == ("straggler: ranks 2, 3 wait in a collective for ranks 0, 1, never seen by this "
                                 "launcher (another node's, or not started)")


def test_the_key_changes_with_what_a_rank_does():
    a = classify([RankFacts(0, open=[BUCKET], thread=SLEEPING), RankFacts(1, open=[BUCKET], thread=LOCKED)], 2)
    b = classify([RankFacts(0, open=[BUCKET], thread=LOCKED), RankFacts(1, open=[BUCKET], thread=LOCKED)], 2)
    assert a.kind == STRAGGLER and b.kind == DEADLOCK and a.key != b.key
