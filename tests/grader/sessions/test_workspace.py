"""Workspaces hold the candidate's files and nothing of the grader's: no manifest (hints and
thresholds), no solution, no compute bound."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.exercises import find, kit_root
from grader.sessions.errors import SessionError
from grader.sessions.lifecycle import new_session
from grader.sessions.store import Store
from grader.sessions.workspace import MARKER, find_marker, is_graded


def files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()}


@pytest.mark.parametrize("slug", ["sampler-replay", "slow-input-pipeline"])
def test_workspace_has_the_candidates_files_only(tmp_path, slug):
    store = Store.open(tmp_path / "s.db")
    session, (sx,) = new_session(store, "Ada", [slug], minutes=45, root=tmp_path / "ws")
    ws = Path(sx.workspace)
    got = files(ws)
    assert {"BRIEF.md", "baseline.json", "train.py", "DIAGNOSIS.md", MARKER} <= got
    assert any(f.startswith("logs/") for f in got)
    assert "exercise.toml" not in got and "bound.py" not in got and "NOTES.md" not in got
    ex = find(slug)
    solution = (kit_root() / "solutions" / slug / "train.py").read_bytes()
    assert all((ws / f).read_bytes() != solution for f in got)
    text = "\n".join((ws / f).read_text(errors="replace") for f in got)
    assert not any(h[:60] in text for h in ex.manifest.hints)
    marker = json.loads((ws / MARKER).read_text())
    assert marker == {"format": 1, "session": session.id, "exercise": slug, "db": str(store.path)}
    (ws / "sub").mkdir()
    assert find_marker(ws / "sub").session == session.id
    assert find_marker(tmp_path) is None
    assert session.minutes == 45


@pytest.mark.parametrize("slugs, candidate, error", [
    ([], "Ada", "no exercise given"),
    (["sampler-replay", "sampler-replay"], "Ada", "names sampler-replay twice"),
    (["sampler-replay"], " \x07 ", "--candidate is empty"),
    (["no-such-thing"], "Ada", "no exercise 'no-such-thing'"),
])
def test_new_session_errors(tmp_path, slugs, candidate, error):
    store = Store.open(tmp_path / "s.db")
    with pytest.raises(Exception, match=error):
        new_session(store, candidate, slugs, root=tmp_path / "ws")
    assert store.sessions() == [] and not (tmp_path / "ws").exists()


def test_an_occupied_folder_is_refused(tmp_path):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "x").write_text("mine")
    with pytest.raises(SessionError, match="already exists and is not empty"):
        new_session(Store.open(tmp_path / "s.db"), "Ada", ["sampler-replay"], root=tmp_path / "ws")


@pytest.mark.parametrize("manifest, graded", [
    (SimpleNamespace(kind="scenario", entry=None), False),
    (SimpleNamespace(entry=None), False),
    (SimpleNamespace(entry="train.py"), True),
])
def test_scenario_exercises_are_not_graded(manifest, graded):
    assert is_graded(manifest) is graded
