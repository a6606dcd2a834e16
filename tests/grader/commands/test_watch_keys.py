"""`trainwreck watch`'s single keys (issue 26 item 7), as rustlings takes them: g grades now, q
quits (cancelling a grading in flight), h the next hint and l the exercises; after each grading
"n of N passed"; the terminal in cbreak mode while watching and set back after."""

from __future__ import annotations

import io
import os
import re
import termios

import pytest
from rich.console import Console

from grader import console
from grader.commands.watch import _shown
from grader.exercises import discover
from grader.practice import watch
from grader.practice.keys import single_keys
from tests.grader.commands.practice_fakes import FakeJob, view


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path / "home"))


def drive(typed: list[str], hold: tuple[int, ...] = (), ticks: int = 20) -> tuple[list[dict], list[FakeJob]]:
    """watch.run on ticks only (no save), ``typed[i]`` the keys typed before tick i."""
    events: list[dict] = []
    jobs: list[FakeJob] = []

    def start(n: int) -> FakeJob:
        jobs.append(FakeJob(n, hold=n in hold))
        return jobs[-1]

    keys = iter(typed)
    watch.run(["train.py"], lambda: "d1", start, [set()] * ticks, events.append,
              keys=lambda: next(keys, ""))
    return [{k: v for k, v in e.items() if k not in ("t", "view")} for e in events], jobs


def test_g_grades_now_though_nothing_changed_and_q_quits():
    events, jobs = drive(["", "", "g", "", "q"])
    kinds = [e["event"] for e in events]
    assert kinds == ["watching", "grading", "progress", "result", "grading", "progress", "result", "stopped"]
    assert events[4] == {"event": "grading", "n": 2, "reason": "asked", "files": []}
    assert events[-1] == {"event": "stopped", "reason": "quit", "finished": 2}
    assert len(jobs) == 2


def test_q_cancels_the_grading_in_flight_and_g_while_one_runs_is_busy():
    events, jobs = drive(["g", "q"], hold=(1,))
    assert [e["event"] for e in events] == ["watching", "grading", "progress", "busy", "cancelled", "stopped"]
    assert events[4]["reason"] == "quit" and jobs[0].cancelled and len(jobs) == 1
    assert events[-1] == {"event": "stopped", "reason": "quit", "finished": 0}


def test_other_keys_go_to_the_caller_and_without_keys_nothing_changes():
    events, _ = drive(["", "", "hl"], ticks=4)
    assert [e for e in events if e["event"] == "key"] == [{"event": "key", "key": "h"}, {"event": "key", "key": "l"}]
    assert events[-1] == {"event": "stopped", "reason": "end", "finished": 1}
    plain: list[dict] = []
    watch.run(["train.py"], lambda: "d1", lambda n: FakeJob(n, hold=False), [set()] * 4, plain.append)
    assert [e["event"] for e in plain] == ["watching", "grading", "progress", "result", "stopped"]


def test_the_terminal_takes_single_keys_while_watching_and_is_set_back():
    master, slave = os.openpty()
    with os.fdopen(slave, "r", closefd=False) as stream:
        before = termios.tcgetattr(slave)
        with single_keys(stream) as keys:
            assert keys is not None and keys() == ""
            assert not termios.tcgetattr(slave)[3] & termios.ICANON  # cbreak: no line editing
            os.write(master, b"hQ")
            assert keys() == "hq"
        assert termios.tcgetattr(slave) == before
    os.close(master)
    os.close(slave)
    with single_keys(io.StringIO()) as keys:  # not a terminal: no keys
        assert keys is None


@pytest.mark.parametrize("width", [80, 120])
def test_watch_shows_n_of_N_passed_the_keys_and_answers_h_and_l(invoke, monkeypatch, tmp_path, width):
    from grader.practice.workspace import open_workspace

    assert invoke("start", "memory-leak", "--dir", str(tmp_path / "ws")).code == 0
    ws = open_workspace(tmp_path / "ws")
    term = Console(width=width, record=True, file=io.StringIO(), highlight=False, soft_wrap=True)
    monkeypatch.setattr(console, "out", term)
    monkeypatch.setattr(console, "err", term)
    emit = _shown(ws, clear=False, keys=True)
    emit({"event": "watching", "files": ["train.py"]})
    emit({"event": "result", "n": 1, "code": 1, "view": view(1)})
    emit({"event": "key", "key": "h"})
    emit({"event": "key", "key": "l"})
    emit({"event": "key", "key": "x"})
    lines = [line.rstrip() for line in term.export_text().splitlines()]
    assert all(len(line) <= width for line in lines), [line for line in lines if len(line) > width]
    scripts = sum(e.kind == "script" for e in discover()[0])
    assert lines[:2] == ["watching train.py: every save grades it again", "keys: h hint, l list, g grade now, q quit"]
    assert "watching: save to grade again; keys: h hint, l list, g grade now, q quit" in lines
    assert f"0 of {scripts} passed" in lines
    assert any(line.startswith("hint 1 of 3: ") for line in lines) and open_workspace(ws.root).state.hints_seen == 1
    assert any(re.fullmatch(r"memory-leak +script +easy +45 +started", line) for line in lines)
    assert lines[-1] == "keys: h hint, l list, g grade now, q quit"


def test_watch_on_a_terminal_grades_on_g_and_stops_on_q(invoke, monkeypatch, tmp_path):
    """Through the CLI, stdin a pty: the keys typed reach the loop (fake gradings, real file events)."""
    import threading
    import time

    from tests.grader.commands.practice_fakes import FakeGrader

    assert invoke("start", "memory-leak", "--dir", str(tmp_path / "ws")).code == 0
    fake = FakeGrader()
    monkeypatch.setattr("grader.practice.grading.spawn", fake)
    master, slave = os.openpty()
    stdin = os.fdopen(slave, "r", closefd=False)
    monkeypatch.setattr("sys.stdin", stdin)
    before = termios.tcgetattr(slave)

    def typist() -> None:
        for key, ready in ((b"g", lambda: len(fake.jobs) == 1 and fake.jobs[0].reported.is_set()),
                           (b"q", lambda: len(fake.jobs) == 2 and fake.jobs[1].reported.is_set())):
            end = time.time() + 20
            while not ready() and time.time() < end:
                time.sleep(0.02)
            os.write(master, key)

    t = threading.Thread(target=typist, daemon=True)
    t.start()
    p = invoke("watch", "--no-clear", cwd=tmp_path / "ws")
    t.join(5)
    assert p.code == 0, p.err
    assert len(fake.jobs) == 2 and "grading 2 (as it is now" in p.out
    assert "keys: h hint, l list, g grade now, q quit" in p.err
    scripts = sum(e.kind == "script" for e in discover()[0])
    assert p.out.count(f"0 of {scripts} passed") == 2
    assert "stopped watching after 2 gradings" in p.err
    assert termios.tcgetattr(slave) == before  # the terminal set back
    stdin.close()
    os.close(master)
    os.close(slave)
