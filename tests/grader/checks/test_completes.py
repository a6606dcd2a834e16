"""completes: statuses and exit codes."""

from __future__ import annotations

import pytest

from grader.checks import run_check
from tests.grader.fakes import ctx_for, spec


@pytest.mark.parametrize("status, says", [("ok", "exited 0"), ("failed", "failed"), ("timeout", "limit")])
def test_completes(tmp_path, status, says):
    c = run_check(spec("completes"), ctx_for(tmp_path, main={"status": status}))
    assert c.passed is (status == "ok") and says in c.message


def test_a_run_ended_at_a_limit_says_which(tmp_path):
    from grader.checks import Context
    from grader.evidence import load_run
    from tests.grader.fakes import FakeManifest
    from tests.grader.rundirs import RunDirBuilder

    limit = {"what": "memory", "value": 913.0, "cap": 800.0, "rank": 1, "pid": 42,
             "message": "rank 1 used 913 MiB, over the memory limit of 800 MiB"}
    b = RunDirBuilder(tmp_path / "main", status="limit", limit=limit, sandbox={"isolated": True})
    for r in range(2):  # the ranks' boot records only: the cap was hit early
        b.event(r, kind="boot", attempt=0, t=1.0, pid=100 + r, rank=r)
    c = run_check(spec("completes"), Context(FakeManifest(), {"main": load_run("main", b.build())}))
    assert not c.passed and not c.environment
    assert c.message == "the run was ended at a limit: rank 1 used 913 MiB, over the memory limit of 800 MiB"


@pytest.mark.parametrize("error, says", [
    ("Traceback (most recent call last):\n  File \"train.py\", line 3\nValueError: bad shape", "ValueError: bad shape"),
    # terminal escapes and a carriage return in the exception's text: the line shown is still the exception's
    ("Traceback (most recent call last):\nRuntimeError: \x1b[2J\x1b[32mALL CHECKS PASSED\x1b[0m\r\x1b[2K passed",
     "rank 1 failed: RuntimeError: ALL CHECKS PASSED passed"),
    # the harness's excerpt breaks lines at the carriage return: the tail is indented, not the exception
    ("Traceback (most recent call last):\nRuntimeError: \x1b[32mALL CHECKS PASSED\x1b[0m\n\x1b]0;x\x07\x1b[2K\x08 passed",
     "rank 1 failed: RuntimeError: ALL CHECKS PASSED"),
    ("", "no error output"),
])
def test_the_failure_line_is_the_exceptions_and_printable(tmp_path, error, says):
    from grader.checks import Context
    from grader.evidence import load_run
    from tests.grader.fakes import FakeManifest
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(tmp_path / "main", status="failed", failure={"rank": 1, "error": error})
    for r in range(2):
        b.event(r, kind="boot", attempt=0, t=1.0, pid=100 + r, rank=r)
    c = run_check(spec("completes"), Context(FakeManifest(), {"main": load_run("main", b.build())}))
    assert not c.passed and says in c.message and "\x1b" not in c.message and "\r" not in c.message, c.message
