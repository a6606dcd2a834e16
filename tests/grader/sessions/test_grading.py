"""Real `trainwreck grade` subprocesses inside a session workspace: each records an attempt; one
SIGKILLed mid-grade loses nothing already recorded, leaves nothing running, and the next grade
works; two at once corrupt nothing and get distinct attempt numbers."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.sessions.lifecycle import new_session
from grader.sessions.store import Store
from tests.conftest import assert_nothing_left

pytestmark = pytest.mark.slow
SLUG = "amp-no-scaler"  # one run plus the cached reference: the quickest grading in the kit
TW = [sys.executable, "-c", "from grader.cli import main; main()"]


def grade(ws: Path, out: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen([*TW, "grade", "--json"], cwd=ws, stdout=open(out, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True, env={**os.environ, "TRAINWRECK_DEBUG": "0"}, **kw)


def test_grading_in_a_workspace_records_attempts_through_kill_and_concurrency(tmp_path):
    store = Store.open(tmp_path / "s.db")
    session, (sx,) = new_session(store, "Ada", [SLUG], root=tmp_path / "ws")
    ws = Path(sx.workspace)

    # 1: as shipped
    p = grade(ws, tmp_path / "g1.log")
    assert p.wait(timeout=170) == 1, (tmp_path / "g1.log").read_text()[-2000:]
    (a1,) = store.attempts(session.id)
    assert (a1.n, a1.status, a1.passed) == (1, "done", False)
    assert a1.result["exercise"] == SLUG and Path(a1.result_path).is_file()
    assert a1.series["main"]["ranks"]["0"]["step"]  # figures for the report, taken at record time

    # 2: SIGKILL the whole grading (trainwreck and its ranks) once the job is running
    (ws / "train.py").write_text((ws / "train.py").read_text() + "\n# attempt two\n")
    p = grade(ws, tmp_path / "g2.log")
    deadline = time.time() + 90
    while time.time() < deadline:
        a = store.attempts(session.id)
        runs = list((tmp_path / "grades").rglob("attempt-2/runs/main/ranks/0/events.jsonl"))
        if len(a) == 2 and runs and runs[0].stat().st_size > 0:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the second grading never started its run")
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=10)
    # The launcher runs in a sandbox of its own session, which dies with the grader (bwrap's
    # --die-with-parent, then the kernel ends its PID namespace): nothing of the grading is left.
    assert_nothing_left(tmp_path / "grades", grace_s=15)
    assert store.attempts(session.id)[1].status == "running"  # nothing finished it
    assert store.attempt(a1.id) == a1  # attempt 1 as it was

    # 3 and 4: two terminals at once; the first one to start reaps attempt 2
    (ws / "train.py").write_text((ws / "train.py").read_text() + "# attempts three and four\n")
    ps = [grade(ws, tmp_path / f"g{n}.log") for n in (3, 4)]
    codes = [p.wait(timeout=300) for p in ps]
    assert codes == [1, 1], [(tmp_path / f"g{n}.log").read_text()[-1500:] for n in (3, 4)]
    attempts = store.attempts(session.id)
    assert [a.n for a in attempts] == [1, 2, 3, 4]
    assert [a.status for a in attempts] == ["done", "interrupted", "done", "done"]
    assert "+# attempt two" in attempts[1].diff
    assert "+# attempts three and four" in attempts[2].diff and attempts[3].diff == ""
    assert all(a.result and a.result["exercise"] == SLUG for a in attempts if a.status == "done")
    assert len({a.result_path for a in attempts if a.result_path}) == 3
    printed = [json.loads((tmp_path / f"g{n}.log").read_text()[(tmp_path / f"g{n}.log").read_text().index("{"):])
               for n in (3, 4)]
    assert {str(Path(p["out_dir"]) / "result.json") for p in printed} == {attempts[2].result_path, attempts[3].result_path}
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
