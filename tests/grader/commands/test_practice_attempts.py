"""A practice workspace's attempts in the one attempt store (grader/attempts.py): a workspace whose
state file is of format 1 (its attempts in the file itself) is moved on first load, atomically and
losing nothing, and goes on working; where it cannot be moved it works as before."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from grader.attempts import open_file
from grader.practice import state as st
from grader.practice.state import ATTEMPTS, STATE
from tests.grader.commands.practice_fakes import fake_grading

SLUG = "memory-leak"

# the attempts of a format-1 state file, as practice wrote them (one an environment failure)
V1_ATTEMPTS = [
    {"n": 1, "at": "2026-03-01T10:00:00+00:00", "passed": False, "score": 0.25, "sha256": "a1" * 32,
     "failed": ["memory_flat", "completes"], "throughput": None, "environment_failure": False},
    {"n": 2, "at": "2026-03-01T10:05:00+00:00", "passed": False, "score": 0.0, "sha256": "a2" * 32,
     "failed": [], "throughput": None, "environment_failure": True},
    {"n": 3, "at": "2026-03-01T10:09:00+00:00", "passed": True, "score": 1.0, "sha256": "a3" * 32,
     "failed": [], "throughput": 0.8123, "environment_failure": False},
]


def v1_state(**kw) -> dict:
    return {"format_version": 1, "exercise": SLUG, "kind": "script", "created_at": "2026-03-01T09:58:00+00:00",
            "hints_seen": 2, "attempts": V1_ATTEMPTS, "passed_at": "2026-03-01T10:09:00+00:00",
            "solution_shown_at": "2026-03-01T10:10:00+00:00", "solution_revealed": False,
            "resets": [{"at": "2026-03-01T10:01:00+00:00", "backup": ".trainwreck-backups/x"}],
            "last_view": {"sha256": "a3" * 32, "view": {"attempt": 3}}, **kw}


def v1_workspace(root: Path, **kw) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / STATE).write_text(json.dumps(v1_state(**kw), indent=2))
    return root


def as_v1(attempts) -> list[dict]:
    return [{"n": a.n, "at": a.finished_at, "passed": a.passed, "score": a.score, "sha256": a.submission_sha256,
             "failed": list(a.failed), "throughput": a.throughput, "environment_failure": a.environment_failure}
            for a in attempts]


def test_a_format_1_workspace_is_moved_on_first_load_and_loses_nothing(tmp_path):
    ws = v1_workspace(tmp_path / "ws")
    state = st.load(ws)
    assert as_v1(state.attempts) == V1_ATTEMPTS
    assert all(a.started_at == a.finished_at and a.status == "done" and a.slug == SLUG for a in state.attempts)
    on_disk = json.loads((ws / STATE).read_text())
    before = v1_state()
    del before["attempts"]
    assert on_disk == {**before, "format_version": 2}  # everything else in the file as it was
    with open_file(ws / ATTEMPTS, create=False) as s:
        assert as_v1(s.attempts()) == V1_ATTEMPTS
    assert st.load(ws) == state  # loading again changes nothing
    assert state.progress() == {"exercise": SLUG, "kind": "script", "passed": True,
                                "passed_at": "2026-03-01T10:09:00+00:00", "attempts": 2, "hints_used": 2,
                                "best_throughput": 0.8123, "solution": "shown"}


def test_a_move_cut_short_is_finished_by_the_next_load_without_doubling_an_attempt(tmp_path):
    ws = v1_workspace(tmp_path / "ws")
    with open_file(ws / ATTEMPTS) as s:  # killed after the store took two of the three, before the rewrite
        for a in st.load(v1_workspace(tmp_path / "copy")).attempts[:2]:
            s.record(a, n=a.n)
    assert as_v1(st.load(ws).attempts) == V1_ATTEMPTS
    assert json.loads((ws / STATE).read_text())["format_version"] == 2


def test_a_store_that_disagrees_with_the_file_leaves_format_1_as_it_was(tmp_path):
    ws = v1_workspace(tmp_path / "ws")
    with open_file(ws / ATTEMPTS) as s:
        s.record(st.load(v1_workspace(tmp_path / "copy")).attempts[0], n=7)  # an attempt the file does not hold
    text = (ws / STATE).read_text()
    state = st.load(ws)
    assert state.format_version == 1 and as_v1(state.attempts) == V1_ATTEMPTS
    assert (ws / STATE).read_text() == text


def test_a_format_1_workspace_that_cannot_be_moved_works_as_before(tmp_path):
    ws = v1_workspace(tmp_path / "ws")
    (ws / ATTEMPTS).mkdir()  # no store can be made there (as in a workspace one cannot write into)
    state = st.load(ws)
    assert state.format_version == 1 and as_v1(state.attempts) == V1_ATTEMPTS
    new = replace(state.attempts[0], n=0, finished_at="2026-03-02T08:00:00+00:00")
    st.update(ws, lambda s: st.add_attempt(ws, s, new))  # recorded in the state file, as format 1 did
    on_disk = json.loads((ws / STATE).read_text())
    assert on_disk["format_version"] == 1 and on_disk["attempts"][:3] == V1_ATTEMPTS
    assert on_disk["attempts"][3] == {**V1_ATTEMPTS[0], "n": 4, "at": "2026-03-02T08:00:00+00:00"}


def test_a_grading_in_a_moved_workspace_is_the_next_attempt(invoke, tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path / "home"))
    assert invoke("start", SLUG, "--dir", str(tmp_path / "ws")).code == 0
    ws = tmp_path / "ws"
    v1_workspace(ws, passed_at=None)  # the workspace as an older trainwreck left it
    fake_grading(monkeypatch, {"completes": True, "memory_flat": True}, throughput=True)
    p = invoke("grade", "--json", cwd=ws)
    assert p.code == 0, p.err
    assert json.loads(p.out)["attempt"] == 4
    state = st.load(ws)
    assert as_v1(state.attempts)[:3] == V1_ATTEMPTS and state.attempts[3].n == 4
    assert state.passed_at == state.attempts[3].finished_at and state.attempts[3].started_at <= state.passed_at
    assert "attempts" not in json.loads((ws / STATE).read_text())


def test_the_lock_taken_again_inside_itself_does_not_wait_on_itself(tmp_path):
    ws = v1_workspace(tmp_path / "ws")
    seen = []
    st.update(ws, lambda s: seen.append(len(s.attempts)))  # update holds the lock; the move inside takes it too
    assert seen == [3] and st.load(ws).format_version == 2
