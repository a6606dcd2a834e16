"""Faults of a real, sandboxed `trainwreck grade` (issue 11): the grader SIGKILLed mid-run leaves no
process of the grading running and no result, and the next grade into a new --out works (the
channel folder the killed one left is cleaned on the way); Ctrl-C stops it cleanly, with the run
recorded as interrupted and nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import channel_server, rundir, sandbox
from tests.conftest import assert_nothing_left, ctrl_c_reaches_it

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sandbox.probe().ok, reason=f"no sandbox here: {sandbox.probe().reason}")]
SLUG = "amp-no-scaler"  # one run plus the cached reference: the quickest grading in the kit
TW = [sys.executable, "-c", "from grader.cli import main; main()"]


def start(out: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([*TW, "grade", SLUG, "--solution", "--out", str(out)], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, env={**os.environ, "TRAINWRECK_DEBUG": "0"},
                            preexec_fn=ctrl_c_reaches_it)


def wait_for_steps(out: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    events = out / "runs" / "main" / "ranks" / "1" / "events.jsonl"
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if events.exists() and '"step"' in events.read_text():
            return
        time.sleep(0.2)
    pytest.fail(f"the grading never got to its ranks' steps (exit {proc.poll()})")


def test_sigkill_of_the_grader_leaves_nothing_running_and_the_next_grade_works(tmp_path):
    p = start(tmp_path / "out1", tmp_path / "g1.log")
    wait_for_steps(tmp_path / "out1", p)
    stale = list(Path("/tmp").glob(f"{channel_server.DIR_PREFIX}{p.pid}-*"))
    p.send_signal(signal.SIGKILL)  # the grader alone: its launcher and ranks are in a session of their own
    p.wait(timeout=10)
    assert_nothing_left(tmp_path / "out1", grace_s=15)
    assert not (tmp_path / "out1" / "result.json").exists()
    assert stale and all(d.exists() for d in stale)  # SIGKILL ran no clean-up

    again = subprocess.run([*TW, "grade", SLUG, "--solution", "--out", str(tmp_path / "out1")],
                           capture_output=True, text=True)
    assert again.returncode == 2 and "already holds files" in again.stderr

    p = start(tmp_path / "out2", tmp_path / "g2.log")
    assert p.wait(timeout=400) == 0, (tmp_path / "g2.log").read_text()[-3000:]
    assert not any(d.exists() for d in stale)
    assert_nothing_left(tmp_path / "out2")


def test_ctrl_c_stops_the_grading_cleanly_and_records_the_run_as_interrupted(tmp_path):
    out = tmp_path / "out"
    p = start(out, tmp_path / "g.log")
    wait_for_steps(out, p)
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=60) == 130, (tmp_path / "g.log").read_text()[-3000:]
    assert "Traceback" not in (tmp_path / "g.log").read_text()
    assert rundir.load_run(out / "runs" / "main")["status"] == "interrupted"
    assert not (out / "result.json").exists()
    assert_nothing_left(out)
