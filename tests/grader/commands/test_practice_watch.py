"""`trainwreck watch` through the CLI: real file-system events (watchfiles) on a real workspace.
Most tests put stand-in gradings in place of the child process, for speed; the last one runs real
gradings, cancels one mid-run by saving again, and checks nothing of it is left running."""

from __future__ import annotations

import _thread
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_nothing_left, ctrl_c_reaches_it
from tests.grader.commands.practice_fakes import FakeGrader, fake_grading

SLUG = "memory-leak"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path / "home"))
    from grader import console

    monkeypatch.setattr(console.out, "width", 400)
    return tmp_path / "home"


@pytest.fixture
def ws(invoke, tmp_path) -> Path:
    assert invoke("start", SLUG, "--dir", str(tmp_path / "ws")).code == 0
    return tmp_path / "ws"


@pytest.fixture
def grader(monkeypatch) -> Callable[..., FakeGrader]:
    def install(hold: tuple[int, ...] = (), errors: dict[int, str] | None = None) -> FakeGrader:
        fake = FakeGrader(hold, errors)
        monkeypatch.setattr("grader.practice.grading.spawn", fake)
        return fake

    return install


@pytest.fixture(autouse=True)
def python_handles_ctrl_c():
    """``meanwhile``'s Ctrl-C (``_thread.interrupt_main``) does nothing where SIGINT is not Python's
    handler, as in tests run from a shell that ignores SIGINT (a background job, nohup): a stuck watch
    would then run into the per-test timeout. The watch runs in this, the main, thread."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def meanwhile(*steps: Callable[[], None], deadline_s: float = 30.0) -> threading.Thread:
    """Run ``steps`` in order on a thread while the test's main thread watches; a watch still going
    after ``deadline_s`` is stopped as Ctrl-C would (the test then fails on what it printed)."""
    done = threading.Event()

    def go() -> None:
        for step in steps:
            step()
        done.wait(deadline_s)
        if not done.is_set():
            _thread.interrupt_main()

    t = threading.Thread(target=go, daemon=True)
    t.done = done  # type: ignore[attr-defined]
    t.start()
    return t


def until(cond: Callable[[], bool], timeout: float = 20.0) -> Callable[[], None]:
    def wait() -> None:
        end = time.time() + timeout
        while not cond() and time.time() < end:
            time.sleep(0.02)

    return wait


def save(path: Path, text: str, settle_s: float = 0.0) -> Callable[[], None]:
    def write() -> None:
        path.write_text(text)
        time.sleep(settle_s)

    return write


def events(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_a_save_is_seen_and_graded_again_an_unchanged_save_is_not(invoke, ws, grader):
    fake = grader()
    shipped = (ws / "train.py").read_text()
    t = meanwhile(until(lambda: fake.jobs and fake.jobs[0].reported.is_set()),
                  save(ws / "train.py", shipped, settle_s=0.6),  # rewritten as it was: nothing to grade
                  save(ws / "train.py", shipped + "# my fix\n"))
    p = invoke("watch", "--max-runs", "2", "--no-clear", cwd=ws)
    t.done.set()
    assert p.code == 0, p.err
    assert len(fake.jobs) == 2
    assert "grading 1 (as it is now" in p.out and "grading 2 (train.py saved" in p.out
    assert "host RSS grows 2.1 MB per step (grading 1)" in p.out
    assert "host RSS grows 2.1 MB per step (grading 2)" in p.out and p.out.count("NOT YET") == 2
    assert "running main (fake grading 2)" in p.err and "stopped watching after 2 gradings" in p.err


def test_a_save_while_grading_cancels_the_grading_in_flight(invoke, ws, grader):
    fake = grader(hold=(1,))
    t = meanwhile(until(lambda: len(fake.jobs) == 1), save(ws / "train.py", "# saved mid-grading\n"))
    p = invoke("watch", "--max-runs", "1", "--json", cwd=ws)
    t.done.set()
    assert p.code == 0, p.err
    ev = events(p.out)
    assert [e["event"] for e in ev] == ["watching", "grading", "progress", "cancelled", "grading", "progress",
                                        "result", "stopped"]
    assert ev[1] | {"t": 0} == {"event": "grading", "t": 0, "n": 1, "reason": "start", "files": []}
    cancelled = ev[3]
    assert (cancelled["n"], cancelled["reason"], cancelled["files"]) == (1, "saved", ["train.py"])
    assert ev[4]["n"] == 2 and ev[4]["reason"] == "saved"
    assert ev[6]["view"]["checks"][0]["message"].endswith("(grading 2)")
    assert ev[7]["reason"] == "max-runs" and ev[7]["finished"] == 1
    assert [j.cancelled for j in fake.jobs] == [True, False]


CHILD = Path(__file__).with_name("watch_child.py")
CTRL_C_DEADLINE_S = 10.0  # a stand-in grading is cancelled at once and the watch exits in well under a
# second; 10 s leaves room for a loaded 2-core machine, and is far below the per-test timeout


@pytest.mark.slow  # starts a process of its own (watch_child.py: the CLI's imports, about 1 s)
def test_ctrl_c_cancels_the_grading_and_exits_cleanly(ws, tmp_path):
    """A real SIGINT to a watch in a process of its own (stand-in gradings, watch_child.py), sent
    while grading 1 runs. The child gets Python's own SIGINT handler even when the tests run from a
    shell that ignores SIGINT (ctrl_c_reaches_it); the watch must be gone within CTRL_C_DEADLINE_S,
    so a watch that outlives its Ctrl-C fails here rather than at the per-test timeout."""
    out, err, jobs = tmp_path / "watch.jsonl", tmp_path / "watch.err", tmp_path / "jobs.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with open(out, "w") as o, open(err, "w") as e:
        p = subprocess.Popen([sys.executable, str(CHILD), str(jobs)], cwd=ws, env=env, stdout=o, stderr=e,
                             preexec_fn=ctrl_c_reaches_it)
    try:
        deadline = time.monotonic() + 60  # the child's imports, on a busy machine; whole lines only
        while not any(ev["event"] == "progress" for ev in events(out.read_text().rpartition("\n")[0])):
            if p.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"grading 1 never ran (exit {p.poll()}): {err.read_text()[-2000:]}")
            time.sleep(0.02)
        p.send_signal(signal.SIGINT)
        try:
            code = p.wait(timeout=CTRL_C_DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the watch still ran {CTRL_C_DEADLINE_S} s after its Ctrl-C: {out.read_text()[-2000:]}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert code == 0, err.read_text()
    ev = events(out.read_text())
    assert [e["event"] for e in ev] == ["watching", "grading", "progress", "cancelled", "stopped"]
    assert (ev[-2]["n"], ev[-2]["reason"]) == (1, "interrupted")
    assert ev[-1] | {"t": 0} == {"event": "stopped", "t": 0, "reason": "interrupted", "finished": 0}
    assert json.loads(jobs.read_text()) == [True]  # the one grading was cancelled
    assert err.read_text() == ""


def test_unchanged_since_the_last_grading_is_shown_not_graded_again(invoke, ws, grader, monkeypatch):
    fake_grading(monkeypatch, {"completes": True, "memory_flat": False})
    assert invoke("grade", cwd=ws).code == 1
    fake = grader()
    t = meanwhile(lambda: time.sleep(1.0), save(ws / "train.py", "# changed\n"))
    p = invoke("watch", "--json", "--max-runs", "1", cwd=ws)
    t.done.set()
    ev = events(p.out)
    assert [e["event"] for e in ev][:3] == ["watching", "unchanged", "grading"]
    assert ev[1]["view"]["attempt"] == 1 and "memory_flat broke" in ev[1]["view"]["checks"][1]["message"]
    assert ev[2]["reason"] == "saved" and len(fake.jobs) == 1


def test_a_missing_file_is_waited_for(invoke, ws, grader):
    fake = grader()
    text = (ws / "train.py").read_text()
    t = meanwhile(until(lambda: fake.jobs and fake.jobs[0].reported.is_set()),
                  lambda: ((ws / "train.py").unlink(), time.sleep(0.6)),
                  save(ws / "train.py", text + "# back\n"))
    p = invoke("watch", "--json", "--max-runs", "2", cwd=ws)
    t.done.set()
    kinds = [e["event"] for e in events(p.out)]
    assert "missing" in kinds and kinds.count("result") == 2 and len(fake.jobs) == 2


def test_a_grading_that_cannot_run_is_one_line_and_watching_goes_on(invoke, ws, grader):
    fake = grader(errors={1: "the kit has no exercise 'memory-leak'"})
    t = meanwhile(until(lambda: fake.jobs and fake.jobs[0].reported.is_set()),
                  save(ws / "train.py", "# again\n"))
    p = invoke("watch", "--max-runs", "2", "--no-clear", cwd=ws)
    t.done.set()
    assert p.code == 0 and "error: grading 1 did not run: the kit has no exercise 'memory-leak'" in p.err
    assert "host RSS grows 2.1 MB per step (grading 2)" in p.out


@pytest.mark.slow  # starts a process of its own (the real grading child, python -m grader.cli)
def test_the_grading_process_reports_a_one_line_error_and_leaves_no_folder(ws, tmp_path, monkeypatch):
    """The real child process, failing before it launches anything."""
    from grader.practice.grading import GradingProcess
    from grader.practice.workspace import open_workspace

    monkeypatch.setenv("TRAINWRECK_KIT", str(tmp_path / "no-kit"))
    job = GradingProcess(open_workspace(ws), device="cpu")
    deadline = time.time() + 60
    while not job.poll() and time.time() < deadline:
        time.sleep(0.05)
    out = job.outcome()
    assert out.code == 2 and out.view is None and "no exercise 'memory-leak'" in out.error
    assert not job.out.exists()


# ---- real gradings ----
TW = [sys.executable, "-m", "grader.cli"]


@pytest.mark.slow
def test_real_gradings_cancelled_by_a_save_and_by_ctrl_c_leave_nothing_running(tmp_path):
    """amp-no-scaler: one run plus the cached reference, the quickest grading in the kit."""
    env = {**os.environ, "TRAINWRECK_HOME": str(tmp_path / "home")}
    ws = tmp_path / "ws"
    subprocess.run([*TW, "start", "amp-no-scaler", "--dir", str(ws)], env=env, check=True, capture_output=True)
    shipped = (ws / "train.py").read_text()
    grades = tmp_path / "home" / "practice" / "grades"
    log = tmp_path / "watch.jsonl"

    def ranks_running(exclude: set[Path]) -> Path | None:
        deadline = time.time() + 120
        while time.time() < deadline:
            for f in grades.glob("*/*/runs/main/ranks/0/events.jsonl"):
                if f.parents[4] not in exclude and f.stat().st_size > 0:
                    return f.parents[4]
            time.sleep(0.2)
        pytest.fail("no grading's ranks started: " + (tmp_path / "watch.err").read_text()[-2000:])

    def wait_for(kind: str, n: int) -> dict:
        deadline = time.time() + 150
        while time.time() < deadline:
            for e in events(log.read_text()):
                if e["event"] == kind and e.get("n") == n:
                    return e
            time.sleep(0.2)
        pytest.fail(f"no {kind} event for grading {n}: {log.read_text()[-2000:]}")

    with open(log, "w") as out, open(tmp_path / "watch.err", "w") as err:
        p = subprocess.Popen([*TW, "watch", "--json"], cwd=ws, env=env, stdout=out, stderr=err,
                             preexec_fn=ctrl_c_reaches_it)
    try:
        first = ranks_running(set())
        # 1: saved while grading 1's ranks run; the new version does not even parse, so grading 2
        # is refused before anything runs, in one line that says where
        (ws / "train.py").write_text(shipped + "\nthis is not python(\n")
        cancelled = wait_for("cancelled", 1)
        assert cancelled["reason"] == "saved" and not first.exists()  # the cancelled grading's folder is gone
        assert_nothing_left(first)
        refused = wait_for("error", 2)
        bad_line = len(shipped.splitlines()) + 2  # after the blank line the "\n" prefix makes
        assert f"train.py, line {bad_line}" in refused["message"] and "fix the syntax" in refused["message"]
        # 2: grading 3 of a good version, stopped by Ctrl-C while its ranks run
        (ws / "train.py").write_text(shipped + "# third\n")
        third = ranks_running({first})
        p.send_signal(signal.SIGINT)
        code = p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert code == 0, (tmp_path / "watch.err").read_text()[-2000:]
    ev = events(log.read_text())
    assert ev[-2]["event"] == "cancelled" and ev[-2]["n"] == 3 and ev[-2]["reason"] == "interrupted"
    assert ev[-1] == {**ev[-1], "event": "stopped", "reason": "interrupted", "finished": 1}
    assert not third.exists()
    assert_nothing_left(grades)
    # the cancelled gradings and the refused one were never recorded, and left no folder behind
    from grader.practice.state import load

    assert load(ws).attempts == [] and not (ws / ".trainwreck-attempts.db").exists()
    assert not [d for d in grades.glob("*/*") if d.is_dir()]
