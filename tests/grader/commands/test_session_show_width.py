"""`trainwreck session show` fits a terminal (issue 26 item 7), rendered with a recording rich
Console of 80 columns: one line per attempt, the checks by attempt (the latest that fit), each
failing check's deciding figure and each flag on one line, the workspace path on a line of its
own, follow-ups and scorecards word-wrapped; --verbose the whole evidence; --json as before."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta

import pytest

from grader.sessions.live import session_view
from grader.sessions.models import Recommendation, parse_time
from tests.grader.commands.test_console_width import shown, terminal
from tests.grader.sessions.fakes import FIXED, add_attempt, result, scored_session

SLUG = "sampler-replay"
WHY = ("rank 1 consumed indices 0-63 twice in epoch 2 and skipped 64-127 after the resume from the newest "
       "checkpoint; the sampler's epoch was never set, so every epoch replays the same order")
FLAG = "reads the reference's checkpoint folder and copies its sampler state into the run " * 2
REASON = ("Found the cause from the ledger within ten minutes, then proved the fix on two world sizes "
          "before touching anything else; would hire for the training-infrastructure team")


def at(store, sid: str, minutes: float) -> str:
    start = parse_time(store.session(sid).started_at)
    return (start + timedelta(minutes=minutes)).isoformat(timespec="seconds")


@pytest.fixture
def session(tmp_path):
    """Four attempts (the third in the revision window, the fourth still failing), a long failing
    message and flag, two interviewers' recommendations, a deep workspace folder."""
    store, sid = scored_session(tmp_path / "s.db", tmp_path / ("a-long-folder-name-" * 5) / "ws")
    for n in (3, 4):
        res = result(SLUG, {"completes": True, "sample_partition": n == 3})
        res["checks"][1]["message"] = WHY
        res["flags"] = [{"kind": "source", "what": FLAG, "where": "train.py:12"}]
        add_attempt(store, sid, SLUG, FIXED + f"# try {n}\nx = 1\n", res, None)
    with store.write() as c:
        for n, minute in ((1, 3), (2, 8), (3, 12), (4, 14.5)):
            c.execute("UPDATE attempts SET started_at = ? WHERE session_id = ? AND n = ?", (at(store, sid, minute), sid, n))
    store.give_feedback(sid, SLUG, at=at(store, sid, 10))
    for sh in store.sheets(sid, SLUG):
        store.save_sheet(replace(sh, recommendation=Recommendation("strong-yes" if sh.interviewer == "ada" else "no",
                                                                   REASON)))
    return store, sid, str(tmp_path / "s.db")


def test_session_show_fits_80_columns_one_line_per_attempt(invoke, monkeypatch, session):
    store, sid, db = session
    term = terminal(monkeypatch, 80)
    r = invoke("session", "show", sid, "--db", db)
    assert r.code == 0, r.err
    lines = shown(term, 80)  # every line within 80 columns, but for the workspace path alone on its line
    assert re.fullmatch(rf"session {sid}: Ada  clock \d+:\d\d of \d+:00 \(.* left, .*\)", lines[0])
    at_ = lines.index("== sampler-replay: Déjà vu after every preemption")
    assert lines[at_ + 1] == "   rubric distributed-debugging; workspace:"
    assert lines[at_ + 2] == f"  {store.exercise(sid, SLUG).workspace}" and len(lines[at_ + 2]) > 80
    a = lines.index("attempts:")
    assert lines[a + 1:a + 6] == [
        "#     at  status  verdict  score  diff       submission",
        "1   3:00  done    failed    0.00  unchanged  ababababab",
        "2   8:00  done    PASSED    1.00  +1 -0      ababababab",
        "3  12:00  done    PASSED    1.00  +2 -0      ababababab",
        "4  14:30  done    failed    0.00  +1 -1      ababababab",
    ]
    c = lines.index("checks by attempt (* = flipped):")
    assert [re.split(r" +", line) for line in lines[c + 1:c + 4]] == [
        ["check", "#1", "#2", "#3", "#4"], ["completes", "pass", "pass", "pass", "pass"],
        ["sample_partition", "FAIL", "pass*", "pass", "FAIL*"]]
    f = lines.index("failing in attempt #4:")
    assert lines[f + 1].startswith("   sample_partition: rank 1 consumed indices 0-63 twice in epoch 2")
    assert lines[f + 1].endswith("…") and len(lines[f + 1]) >= 78
    assert lines[f + 2].startswith("   flag (source) [train.py:12]: reads the reference's checkpoint folder")
    assert lines[f + 2].endswith("…")
    assert "whole evidence: --verbose, or --json" in lines
    # the follow-ups wrapped, every word kept; the scorecards wrapped under the same width
    flat = " ".join(" ".join(lines).split())
    view = session_view(store, sid)
    for fu in view.exercises[0].followups:
        assert " ".join(fu.followup.question.split()) in flat
    assert f"ada: strong yes: {REASON}" in flat and f"bob: no: {REASON}" in flat
    assert "  attempt #3: revision window" in lines and "  attempt #4: revision window" in lines


def test_session_show_verbose_has_the_whole_evidence(invoke, monkeypatch, session):
    store, sid, db = session
    term = terminal(monkeypatch, 80)
    assert invoke("session", "show", sid, "--db", db, "--verbose").code == 0
    lines = shown(term, 80)
    flat = " ".join(" ".join(lines).split())
    assert f"sample_partition: {WHY}" in flat and " ".join(FLAG.split()) in flat
    assert "whole evidence: --verbose, or --json" not in lines


def test_session_show_keeps_the_latest_attempts_that_fit_and_verbose_all(invoke, monkeypatch, session):
    store, sid, db = session
    for n in range(5, 15):
        add_attempt(store, sid, SLUG, FIXED + f"# try {n}\n", result(SLUG, {"completes": True,
                                                                            "sample_partition": False}), None)
    term = terminal(monkeypatch, 80)
    assert invoke("session", "show", sid, "--db", db).code == 0
    lines = shown(term, 80)
    (head,) = [line for line in lines if line.startswith("checks by attempt")]
    assert head == "checks by attempt (* = flipped); #1-#5 left out, see --verbose:"
    cols = re.split(r" +", lines[lines.index(head) + 1])
    assert cols == ["check", *[f"#{n}" for n in range(6, 15)]]
    term = terminal(monkeypatch, 80)
    assert invoke("session", "show", sid, "--db", db, "-v").code == 0
    lines = shown(term, 80)
    heads = [re.split(r" +", line)[1:] for line in lines if line.startswith("check ")]
    assert sum(heads, []) == [f"#{n}" for n in range(1, 15)] and len(heads) == 2


def test_session_show_json_is_unchanged(invoke, session):
    store, sid, db = session
    out = json.loads(invoke("session", "show", sid, "--db", db, "--json").out)
    want = session_view(store, sid).to_json()
    for view in (out, want):  # the clock moves between the two views
        view.pop("clock")
        view["session"].pop("elapsed_s")
    assert out == json.loads(json.dumps(want, default=str))
