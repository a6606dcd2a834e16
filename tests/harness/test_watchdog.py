"""The hang report as the user reads it (hang.txt)."""

from __future__ import annotations

import pytest

from harness.watchdog import format_hang


def report(phase, *ranks):
    return {"since_progress_s": 15.3, "hang_timeout_s": 15.0, "startup_timeout_s": 120.0, "phase": phase,
            "attempt": 0, "ranks": list(ranks)}


def rank(r, exited=False, status=None, site="/w/train.py:19", pending=None, last=None, step=6):
    return {"rank": r, "exited": exited, "exit_status": status, "last_step": step, "blocked_at": site,
            "pending_collective": pending, "last_collective": last}


BARRIER = {"op": "barrier", "seq": 4, "site": "/w/train.py:19"}


@pytest.mark.parametrize("rep, lines", [
    (report("running", rank(0, pending=BARRIER), rank(1, site=None, last=BARRIER, step=7)), [
        "No rank made progress for 15.3 s (hang timeout 15 s, attempt 0).",
        "rank 0: last completed step 6; blocked at /w/train.py:19",
        "    inside barrier #4 called at /w/train.py:19",
        "rank 1: last completed step 7; blocked at unknown (no stack dump)",
        "    last collective: barrier #4 at /w/train.py:19",
    ]),
    (report("startup", rank(0, step=0)), [
        "No optimizer step yet, and no rank made progress for 15.3 s (start-up allowance 120 s, attempt 0).",
        "rank 0: last completed step 0; blocked at /w/train.py:19",
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
])
def test_format_hang(rep, lines):
    assert format_hang(rep).splitlines() == lines
