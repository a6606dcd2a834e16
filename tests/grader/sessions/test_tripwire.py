"""Reads of the answers from outside the kit (issue 26 item 2b): a `cat solutions/...` while a
session is open is timed by the file system and shown as a reveal; the kit's own reads of the
same files (grading the reference, the similarity flag, `solution --reveal`) leave nothing."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from grader.files import copy_quietly, read_quietly
from grader.sessions import tripwire
from grader.sessions.models import Session


def plain_read(p: Path) -> None:
    with open(p, "rb") as f:
        f.read()


@pytest.fixture
def kit(tmp_path) -> Path:
    k = tmp_path / "kit"
    for slug in ("alpha", "beta"):
        (k / "solutions" / slug).mkdir(parents=True)
        (k / "solutions" / slug / "train.py").write_text(f"print('{slug} fixed')\n")
        (k / "solutions" / slug / "NOTES.md").write_text("root cause\n")
    return k


@pytest.fixture
def home(tmp_path) -> Path:
    h = tmp_path / "home"
    if tripwire.unwatched(tmp_path / "kit-missing", h).startswith("this system"):
        pytest.skip("no O_NOATIME here: the kit's reads cannot be told from others'")
    return h


@pytest.fixture
def armed(kit, home):
    why = tripwire.arm("s1", kit, home)
    if why:  # a noatime mount: the views say so (test_unwatched_*); nothing here can be seen
        pytest.skip(f"reads are not watched on this file system: {why}")
    return kit


def test_a_plain_read_is_recorded_once_with_its_time_and_the_file_is_armed_again(armed, home):
    before = datetime.now(UTC) - timedelta(seconds=1)  # atime is the kernel's coarse clock
    plain_read(armed / "solutions/alpha/train.py")
    (r,) = tripwire.sweep(armed, home)
    assert (r.path, r.slug, r.kind) == ("solutions/alpha/train.py", "alpha", "read")
    assert before <= datetime.fromisoformat(r.at) <= datetime.now(UTC) + timedelta(seconds=1)
    assert tripwire.sweep(armed, home) == []  # recorded once
    plain_read(armed / "solutions/alpha/train.py")  # armed again: a second read is seen too
    assert [x.kind for x in tripwire.sweep(armed, home)] == ["read"]
    assert [x.path for x in tripwire.ledger(home)] == ["solutions/alpha/train.py"] * 2


def test_the_kits_quiet_reads_and_copies_leave_nothing(armed, home, tmp_path):
    assert read_quietly(armed / "solutions/beta/train.py") == b"print('beta fixed')\n"
    copy_quietly(armed / "solutions/beta/NOTES.md", tmp_path / "copy.md")
    assert (tmp_path / "copy.md").read_text() == "root cause\n"
    os.stat(armed / "solutions/beta/train.py")  # a stat is no read
    assert tripwire.sweep(armed, home) == []


def test_a_second_home_arming_the_same_kit_is_not_a_change_of_its_answers(armed, home, tmp_path):
    """Two interviewers (or two tests side by side) with homes of their own, one kit: the second
    session's arming leaves the files it finds armed as they are, so the first sees nothing."""
    assert tripwire.arm("s2", armed, tmp_path / "other-home") == ""
    assert tripwire.sweep(armed, home) == []
    plain_read(armed / "solutions/beta/NOTES.md")  # a read is still seen
    assert [r.kind for r in tripwire.sweep(armed, home)] == ["read"]


def test_hiding_a_read_by_setting_the_read_time_back_moves_the_change_time(armed, home):
    p = armed / "solutions/alpha/NOTES.md"
    st = p.stat()
    plain_read(p)
    time.sleep(0.02)  # the change time moves on the kernel's coarse clock
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # `touch -a -d`: the read time as it was armed
    assert [(r.path, r.kind) for r in tripwire.sweep(armed, home)] == [("solutions/alpha/NOTES.md", "set")]
    assert "set outside the kit" in tripwire.ledger(home)[0].outcome()


def test_a_file_replaced_after_arming_is_set_and_one_added_is_armed_without_a_report(armed, home):
    (armed / "solutions/alpha/extra.py").write_text("x = 1\n")
    p = armed / "solutions/beta/train.py"
    p.unlink()
    p.write_text("print('rewritten')\n")  # ext4 may hand the freed inode straight back
    assert [(r.path, r.kind) for r in tripwire.sweep(armed, home)] == [("solutions/beta/train.py", "set")]
    plain_read(armed / "solutions/alpha/extra.py")
    assert [r.path for r in tripwire.sweep(armed, home)] == ["solutions/alpha/extra.py"]


def session(sid: str, start: datetime, closed: datetime | None = None) -> Session:
    return Session(sid, "Ann", start.isoformat(), start.isoformat(), 45, "/tmp/s",
                   closed.isoformat() if closed else None)


def test_a_session_sees_the_reads_of_its_exercises_inside_its_open_time(armed, home):
    start = datetime.now(UTC) - timedelta(seconds=5)
    plain_read(armed / "solutions/alpha/train.py")
    plain_read(armed / "solutions/beta/train.py")
    tripwire.sweep(armed, home)
    mine = tripwire.reveals(session("s1", start), ["alpha"], armed, home)
    assert [(r.slug, r.what, r.outcome, r.place) for r in mine] == [
        ("alpha", "solutions/alpha/train.py", "read outside the kit", str(armed))]
    later = session("s2", datetime.now(UTC) + timedelta(seconds=5))  # opened after the read
    assert tripwire.reveals(later, ["alpha", "beta"], armed, home) == []
    closed = session("s3", start - timedelta(hours=1), closed=start)  # closed before it
    assert tripwire.reveals(closed, ["alpha"], armed, home) == []


def test_unwatched_reads_are_said_and_noted_for_the_session(kit, home, monkeypatch):
    monkeypatch.setattr(tripwire, "_records_reads", lambda state: False)
    why = tripwire.arm("s9", kit, home)
    assert why == "this file system does not record read times (mounted noatime)"
    assert tripwire.watched("s9", home) == why
    assert not (home / "answers" / tripwire.ARMED).exists()  # nothing armed, nothing swept
    assert tripwire.sweep(kit, home) == []
    assert tripwire.watched("never-armed", home).startswith("not armed when it opened")


def test_a_kit_without_solutions_is_unwatched_with_the_reason(tmp_path, home):
    assert tripwire.arm("s1", tmp_path / "empty", home).endswith("has no solutions/ folder")


# ---- end to end, on a copy of the kit's answers ----------------------------------------------
@pytest.fixture
def own_home(tmp_path, monkeypatch, private_kit):
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TRAINWRECK_DB", raising=False)
    return tmp_path / "home"


def test_a_cat_of_the_reference_during_a_session_reaches_show_and_the_debrief_and_the_kit_does_not(
        invoke, tmp_path, own_home):
    from grader.exercises import find
    from grader.submission import assemble, files_digest
    from grader.validity.suite import script_source

    r = invoke("session", "new", "--candidate", "Ann", "--exercise", "memory-leak", "--dir", str(tmp_path / "S"),
               "--json")
    assert r.code == 0, r.err
    sid = json.loads(r.out)["session"]
    why = tripwire.watched(sid)
    view = json.loads(invoke("session", "show", sid, "--json").out)
    assert view["answer_reads_unwatched"] == (why or None)
    if why:
        pytest.skip(f"reads are not watched here, and the view says so: {why}")

    # what the kit does with the reference during an interview: none of it is a read from outside
    ex = find("memory-leak")
    assemble(ex, "solution", None, tmp_path / "assembled")  # `grade --solution`, the reference run
    files_digest(ex.solution_dir, ex.manifest.editable)  # the reference cache's key
    script_source("memory-leak", None, "solution")  # the validity suite
    ws = tmp_path / "S" / "memory-leak"
    for cmd in (["list"], ["show", "memory-leak"]):  # the manifests are read too
        assert invoke(*cmd, cwd=ws).code == 0
    assert invoke("start", "memory-leak", "--dir", str(ws / "X")).code == 0
    assert invoke("solution", "--reveal", "--yes", "--notes", cwd=ws / "X").code == 0
    assert invoke("hint", cwd=ws / "X").code == 0
    view = json.loads(invoke("session", "show", sid, "--json").out)
    assert [(v["what"], v["outcome"]) for v in view["reveals"]] == [("the reference diff and notes", "shown"),
                                                                      ("hint 1 of 3", "shown")]

    plain_read(ex.solution_dir / "train.py")  # `cat solutions/memory-leak/train.py`
    view = json.loads(invoke("session", "show", sid, "--json").out)
    assert [(v["what"], v["outcome"]) for v in view["reveals"]][-1] == (
        "solutions/memory-leak/train.py", "read outside the kit")
    out = tmp_path / "debrief.md"
    assert invoke("report", sid, "--format", "md", "--out", str(out)).code == 0
    assert "memory-leak: solutions/memory-leak/train.py, read outside the kit" in out.read_text()

    plain_read(ex.dir / "exercise.toml")  # the hints are in the manifest
    view = json.loads(invoke("session", "show", sid, "--json").out)
    assert [(v["what"], v["outcome"]) for v in view["reveals"]][-1] == (
        "exercises/memory-leak/exercise.toml", "read outside the kit")
