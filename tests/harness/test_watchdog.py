"""The hang report as the user reads it (hang.txt): what kind of stall ended the job (a deadlock, a
straggler, no progress at all) and by which limit, where each rank is, which collective it waits
in and for how long, what a rank outside every collective was doing, when the parent last saw it
use CPU, and who waited while who worked."""

from __future__ import annotations

import pytest

from harness.stall import EXITED, IN_COLLECTIVE, OUTSIDE
from harness.watchdog import format_hang, story


def report(phase, *ranks, **extra):
    rep = {"since_progress_s": 15.3, "hang_timeout_s": 15.0, "startup_timeout_s": 120.0, "phase": phase,
           "attempt": 0, "ranks": list(ranks)}
    rep.update(extra)
    return rep


def rank(r, exited=False, status=None, site="/w/train.py:19", pending=None, last=None, step=6, **extra):
    state = EXITED if exited else IN_COLLECTIVE if pending else OUTSIDE
    return {"rank": r, "exited": exited, "exit_status": status, "last_step": step, "blocked_at": site,
            "state": state, "pending_collective": pending, "pending_collectives": [pending] if pending else [],
            "last_collective": last, **extra}


BARRIER = {"op": "barrier", "seq": 4, "site": "/w/train.py:19"}
ALL_REDUCE = {"op": "all_reduce", "seq": 5, "site": "/w/train.py:17", "waiting_s": 40.0}


@pytest.mark.parametrize("rep, lines", [
    (report("running", rank(0, pending=BARRIER), rank(1, site=None, last=BARRIER, step=7)), [
        "No rank made progress for 15.3 s (hang timeout 15 s, attempt 0).",
        "rank 0: last completed step 6; blocked at /w/train.py:19",
        "    waiting in barrier #4 called at /w/train.py:19",
        "rank 1: last completed step 7; blocked at unknown (no stack dump)",
        "    outside any collective",
        "    last collective: barrier #4 at /w/train.py:19",
    ]),
    (report("startup", rank(0, step=0)), [
        "No optimizer step yet, and no rank made progress for 15.3 s (start-up allowance 120 s, attempt 0).",
        "rank 0: last completed step 0; blocked at /w/train.py:19",
        "    outside any collective",
    ]),
    (report("running", rank(0, exited=True, status="ok", step=3), rank(1, exited=True, status="killed")), [
        "No rank made progress for 15.3 s (hang timeout 15 s, attempt 0).",
        "rank 0: exited (ok) after step 3",
        "rank 1: died without an exit record (killed) after step 6",
    ]),
    (report("startup"), [
        "No optimizer step yet, and no rank made progress for 15.3 s (start-up allowance 120 s, attempt 0).",
        "No rank has started: the launcher is still in rendezvous or start-up (see launcher.log).",
    ]),
    # with the parent's CPU readings: rank 1 waited 40 s while rank 0 worked until 16 s ago
    (report("running",
            rank(0, pending={**BARRIER, "waiting_s": 15.5}, busy_s_ago=16.0),
            rank(1, site="/w/train.py:17", pending=ALL_REDUCE, step=7, busy_s_ago=41.0),
            busy_fraction=0.1, last_progress_by="CPU (rank 0)",
            story=["rank 1 was waiting in all_reduce #5 from 40.0 s before detection while rank 0 "
                   "(busy until 16.0 s before detection) was still working"]), [
        "No rank made progress for 15.3 s (hang timeout 15 s, attempt 0).",
        "Progress is a new record from any rank, or a rank using at least 10% of a core (read from /proc); "
        "last progress: CPU (rank 0).",
        "rank 0: last completed step 6; blocked at /w/train.py:19",
        "    waiting in barrier #4 called at /w/train.py:19 for 15.5 s",
        "    last seen using CPU 16.0 s before detection",
        "rank 1: last completed step 7; blocked at /w/train.py:17",
        "    waiting in all_reduce #5 called at /w/train.py:17 for 40.0 s",
        "    last seen using CPU 41.0 s before detection",
        "rank 1 was waiting in all_reduce #5 from 40.0 s before detection while rank 0 (busy until "
        "16.0 s before detection) was still working",
    ]),
    # a straggler the stall limit ended: not a hang, and the report says what the outside rank was doing
    (report("running",
            rank(0, site="/w/train.py:31", last={**ALL_REDUCE, "seq": 8}, step=3, doing="sleeping"),
            rank(1, site="/w/train.py:54", pending={**ALL_REDUCE, "seq": 9, "site": "/w/train.py:54"}, step=3),
            kind="straggler", ended_by="stall limit", stall_limit_s=1830.0,
            stall=["straggler: rank 1 waits in a collective for rank 0, which is outside any collective",
                   "rank 0 is outside any collective at w/train.py:31, sleeping for 1830.2 s"]), [
        "No rank made progress for 15.3 s (stall limit 1830 s, attempt 0).",
        "Straggler: rank 1 waits in a collective for rank 0, which is outside any collective.",
        "Not a hang: no collective was shown unable to complete; the job was ended at the stall limit.",
        "rank 0: last completed step 3; blocked at /w/train.py:31",
        "    outside any collective: sleeping",
        "    last collective: all_reduce #8 at /w/train.py:17",
        "rank 1: last completed step 3; blocked at /w/train.py:54",
        "    waiting in all_reduce #9 called at /w/train.py:54 for 40.0 s",
    ]),
    # a grading's time limit ran out while a straggler held the job
    (report("running", rank(0, site="/w/up.py:9", step=3, doing="writing a socket",
                            pending={**BARRIER, "async": True}, state=OUTSIDE),
            kind="straggler", ended_by="time limit", stall=["straggler: rank 1 waits in a collective for rank 0, "
                                                              "which is outside any collective"]), [
        "The run's time limit ran out while no rank had made progress for 15.3 s (attempt 0).",
        "Straggler: rank 1 waits in a collective for rank 0, which is outside any collective.",
        "Not a hang: no collective was shown unable to complete; the job was ended at the run's time limit.",
        "rank 0: last completed step 3; blocked at /w/up.py:9",
        "    outside any collective: writing a socket",
        "    issued and not waited on barrier #4 called at /w/train.py:19",
    ]),
    (report("running", rank(0, pending=BARRIER), kind="deadlock", ended_by="hang timeout",
            stall=["deadlock: rank 0 waits in a collective for rank 1, which has exited"]), [
        "No rank made progress for 15.3 s (hang timeout 15 s, attempt 0).",
        "Deadlock: rank 0 waits in a collective for rank 1, which has exited.",
        "rank 0: last completed step 6; blocked at /w/train.py:19",
        "    waiting in barrier #4 called at /w/train.py:19",
    ]),
])
def test_format_hang(rep, lines):
    assert format_hang(rep).splitlines() == lines


@pytest.mark.parametrize("ranks, says", [
    # rank 0 computed (evaluated) long after rank 1 began to wait: named as the one still working
    ([rank(0, pending={**BARRIER, "waiting_s": 6.0}, busy_s_ago=6.5),
      rank(1, pending=ALL_REDUCE, busy_s_ago=41.0)],
     ["rank 1 was waiting in all_reduce #5 from 40.0 s before detection while rank 0 (busy until 6.5 s "
      "before detection) was still working"]),
    # both stopped working when they began to wait (within a second): nobody worked while another waited
    ([rank(0, pending={**BARRIER, "waiting_s": 6.0}, busy_s_ago=6.2),
      rank(1, pending={**ALL_REDUCE, "waiting_s": 6.1}, busy_s_ago=6.3)], []),
    # never seen busy, or exited: no claim
    ([rank(0, exited=True, busy_s_ago=None), rank(1, pending=ALL_REDUCE, busy_s_ago=None)], []),
])
def test_story_says_who_waited_while_who_worked(ranks, says):
    assert story(ranks) == says
