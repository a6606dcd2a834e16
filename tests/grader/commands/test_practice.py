"""Practice from the command line, in-process (nothing launches: gradings are stand-ins built from
hand-made result.json dicts): start, hint, solution, reset, grade and list inside and outside a
workspace, the state file's errors, and what practice output never shows."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.exercises import find, kit_root
from grader.practice.state import ATTEMPTS, STATE, load
from grader.sessions.lifecycle import new_session
from grader.sessions.store import Store
from grader.sessions.workspace import MARKER
from tests.grader.commands.practice_fakes import HIDDEN, fake_grading

SLUG = "memory-leak"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """The user's state (registry, gradings) in the test's own folder."""
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(autouse=True)
def wide(monkeypatch):
    """Table cells on one line each, so a message can be matched whole."""
    from grader import console

    monkeypatch.setattr(console.out, "width", 400)


@pytest.fixture
def ws(invoke, tmp_path) -> Path:
    p = invoke("start", SLUG, "--dir", str(tmp_path / "ws"))
    assert p.code == 0, p.err
    return tmp_path / "ws"


def files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()}


def one_line_error(p, *says: str) -> str:
    assert p.code == 2, (p.out, p.err)
    lines = p.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), p.err
    assert all(s in lines[0] for s in says), lines[0]
    assert "Traceback" not in p.err
    return lines[0]


def state(ws: Path) -> dict:
    return json.loads((ws / STATE).read_text())


def attempts(ws: Path) -> list:
    """The workspace's attempts, as its attempt store holds them."""
    return load(ws).attempts


# ---- start ----
def test_start_makes_the_interview_workspace_with_a_state_file_and_prints_the_brief(invoke, tmp_path, ws, home):
    ex = find(SLUG)
    sx = new_session(Store.open(tmp_path / "s.db"), "Ada", [SLUG], root=tmp_path / "session")[1][0]
    assert files(ws) - {STATE} == files(Path(sx.workspace)) - {MARKER}  # the same contents as an interview's
    assert {"BRIEF.md", "train.py", "DIAGNOSIS.md", "baseline.json"} <= files(ws)
    assert "exercise.toml" not in files(ws) and "NOTES.md" not in files(ws)
    solution = (kit_root() / "solutions" / SLUG / "train.py").read_bytes()
    assert all((ws / f).read_bytes() != solution for f in files(ws))
    on_disk = "\n".join((ws / f).read_text(errors="replace") for f in files(ws))
    assert not any(h[:50] in on_disk for h in ex.manifest.hints)
    s = state(ws)
    assert s["format_version"] == 2 and s["exercise"] == SLUG and s["hints_seen"] == 0 and "attempts" not in s
    assert not (ws / ATTEMPTS).exists() and attempts(ws) == []  # the attempt store is made by the first grading
    registry = json.loads((home / "practice" / "workspaces.json").read_text())
    assert [w["path"] for w in registry["workspaces"]] == [str(ws)]
    # printed: the brief, then where and what next
    p = invoke("start", SLUG, "--dir", str(tmp_path / "ws2"))
    assert ex.brief.read_text().splitlines()[0] in p.out and "trainwreck watch" in p.out


def test_start_defaults_to_a_folder_named_after_the_slug_and_says_so_in_json(invoke, tmp_path):
    p = invoke("start", SLUG, "--json", cwd=tmp_path)
    assert p.code == 0, p.err
    out = json.loads(p.out)
    assert out["workspace"] == str(tmp_path / SLUG) and out["editable"] == ["train.py"] and out["kind"] == "script"
    assert "train.py" in out["files"] and out["brief"].startswith("#")


@pytest.mark.parametrize("args, says", [
    (["start", "no-such-exercise"], "no exercise 'no-such-exercise'"),
    (["start"], "Missing argument 'SLUG'"),
])
def test_start_bad_input(invoke, tmp_path, args, says):
    one_line_error(invoke(*args, cwd=tmp_path), says)
    assert not (tmp_path / "no-such-exercise").exists()


def test_start_refuses_a_folder_that_is_not_empty(invoke, tmp_path, ws):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    one_line_error(invoke("start", SLUG, "--dir", str(tmp_path / "mine")), "already exists and is not empty", "--dir")
    assert files(tmp_path / "mine") == {"notes.txt"}
    one_line_error(invoke("start", SLUG, "--dir", str(ws)), "already a practice workspace", "cd into it")
    (tmp_path / "empty").mkdir()
    assert invoke("start", SLUG, "--dir", str(tmp_path / "empty")).code == 0


# ---- outside a workspace, and a state file that cannot be used ----
PRACTICE_COMMANDS = [["grade"], ["run"], ["hint"], ["hint", "--all"], ["watch"], ["solution"], ["reset", "--yes"]]


@pytest.mark.parametrize("args", PRACTICE_COMMANDS)
def test_outside_a_workspace_each_command_says_how_to_start_one(invoke, tmp_path, args):
    one_line_error(invoke(*args, cwd=tmp_path), "trainwreck start SLUG")


@pytest.mark.parametrize("content, says", [
    ("{not json", "not valid JSON"),
    ('["a list"]', "not a JSON object"),
    ('{"format_version": 1, "exercise": "memory-leak", "hints_seen": -1}', "hints_seen -1 is not a count"),
    ('{"format_version": 1, "exercise": "memory-leak", "attempts": [{"n": 1}]}', "KeyError"),
    ('{"exercise": "memory-leak"}', "format_version None, expected 2"),
    ('{"format_version": 9, "exercise": "memory-leak"}', "written by a newer trainwreck"),
])
@pytest.mark.parametrize("args", PRACTICE_COMMANDS)
def test_a_bad_state_file_is_one_line_naming_it_and_the_fix(invoke, ws, args, content, says):
    (ws / STATE).write_text(content)
    line = one_line_error(invoke(*args, cwd=ws / "logs"), str(ws / STATE), says)  # from a subfolder too
    assert "trainwreck start SLUG --dir NEW_DIR" in line or "upgrade trainwreck" in line


def test_list_warns_about_a_bad_state_file_and_lists_the_rest(invoke, tmp_path, ws):
    assert invoke("start", "lr-scaling", "--dir", str(tmp_path / "other")).code == 0
    (ws / STATE).write_text("{oops")
    p = invoke("list", "--json")
    assert p.code == 0 and str(ws / STATE) in p.err
    rows = {r["workspace"]: r for r in json.loads(p.out)["practice"]}
    assert "error" in rows[str(ws)] and rows[str(tmp_path / "other")]["exercise"] == "lr-scaling"


# ---- hints ----
def test_hints_unfold_one_at_a_time_and_the_count_is_kept(invoke, ws):
    hints = find(SLUG).manifest.hints
    p = invoke("hint", "--all", cwd=ws)
    assert p.code == 0 and "no hint seen yet" in p.out
    for i, h in enumerate(hints, 1):
        p = invoke("hint", cwd=ws)
        assert p.code == 0 and f"hint {i} of {len(hints)}: {h}" in p.out
        assert not any(other in p.out for other in hints if other != h)
        assert state(ws)["hints_seen"] == i
    p = invoke("hint", cwd=ws)
    assert "no more hints" in p.out and state(ws)["hints_seen"] == len(hints)
    p = invoke("hint", "--all", "--json", cwd=ws)
    assert json.loads(p.out) == {"exercise": SLUG, "seen": 3, "total": 3, "hint": None, "hints": hints}
    assert not any(h[:40] in (ws / STATE).read_text() for h in hints)  # the count is kept, not the text


def test_hint_json_gives_the_new_one(invoke, ws):
    out = json.loads(invoke("hint", "--json", "--workspace", str(ws)).out)
    assert out["seen"] == 1 and out["hint"] == find(SLUG).manifest.hints[0] and out["hints"] == [out["hint"]]


# ---- grade inside a workspace: recorded, shown without evidence figures ----
def test_a_failed_grade_is_recorded_and_shows_what_was_observed_never_the_evidence(invoke, ws, monkeypatch, home):
    calls = []
    fake_grading(monkeypatch, {"completes": True, "memory_flat": False}, calls=calls)
    p = invoke("grade", cwd=ws)
    assert p.code == 1, p.err
    assert "memory_flat broke: rank 1 consumed indices 0-63 twice" in p.out and "NOT YET" in p.out
    assert "`trainwreck hint` (0 of 3 hints seen)" in p.out
    assert str(HIDDEN) not in p.out + p.err and "solutions" not in p.out
    assert calls[0].workspace == ws and str(calls[0].out_dir).startswith(str(home / "practice" / "grades"))
    (a,) = attempts(ws)
    assert (a.n, a.passed, a.failed, a.status, a.slug) == (1, False, ("memory_flat",), "done", SLUG)
    assert a.started_at <= a.finished_at
    p = invoke("grade", "--json", cwd=ws)
    view = json.loads(p.out)
    assert view["attempt"] == 2 and view["checks"][1] == {
        "name": "memory_flat", "passed": False, "required": True, "environment": False,
        "message": "memory_flat broke: rank 1 consumed indices 0-63 twice"}
    assert str(HIDDEN) not in p.out and "evidence" not in p.out and "solutions" not in p.out


def test_grade_with_the_workspaces_slug_or_workspace_flag_is_recorded_too(invoke, ws, tmp_path, monkeypatch):
    fake_grading(monkeypatch, {"completes": True})
    assert invoke("grade", SLUG, cwd=ws).code == 0
    assert invoke("grade", "--workspace", str(ws), cwd=tmp_path).code == 0
    assert [a.n for a in attempts(ws)] == [1, 2]


# ---- solution: refused until passed, or revealed on confirmation ----
def test_solution_is_refused_until_passed_then_revealed_when_confirmed(invoke, ws, monkeypatch):
    one_line_error(invoke("solution", cwd=ws), "has not passed in this workspace yet", "--reveal")
    one_line_error(invoke("solution", "--reveal", cwd=ws), "add --yes to confirm")
    assert state(ws)["solution_shown_at"] is None
    p = invoke("solution", "--reveal", "--yes", cwd=ws)
    assert p.code == 0, p.err
    assert p.out.startswith("--- workspace/train.py\n+++ solution/train.py\n@@")
    assert "recorded as revealed" in p.err
    s = state(ws)
    assert s["solution_revealed"] is True and s["solution_shown_at"]
    p = invoke("list", "--json")
    assert json.loads(p.out)["practice"][0]["solution"] == "revealed"


def test_solution_after_a_pass_is_shown_without_reveal_and_not_counted_as_revealed(invoke, ws, monkeypatch):
    (ws / "train.py").write_text((kit_root() / "solutions" / SLUG / "train.py").read_text() + "# mine\n")
    fake_grading(monkeypatch, {"completes": True, "memory_flat": True})
    p = invoke("grade", cwd=ws)
    assert p.code == 0 and "PASSED" in p.out and "trainwreck solution" in p.out
    p = invoke("solution", "--json", cwd=ws)
    out = json.loads(p.out)
    assert out["revealed"] is False and out["passed"] is True
    assert out["diff"].endswith("-# mine\n") and out["notes"].strip()
    assert state(ws)["solution_revealed"] is False
    p = invoke("solution", "--notes", cwd=ws)
    assert p.code == 0 and "-# mine" in p.out and out["notes"].splitlines()[0] in p.out


def test_solution_confirmed_on_a_terminal(invoke, ws, monkeypatch):
    monkeypatch.setattr("sys.stdin", SimpleNamespace(isatty=lambda: True))
    monkeypatch.setattr("click.confirm", lambda *a, **k: True)
    assert invoke("solution", "--reveal", cwd=ws).code == 0 and state(ws)["solution_revealed"]


# ---- reset ----
def test_reset_restores_the_original_and_keeps_a_backup(invoke, ws):
    shipped = (ws / "train.py").read_text()
    (ws / "train.py").write_text("my fix\n")
    (ws / "logs" / "rank0.log").unlink(missing_ok=True)
    (ws / "DIAGNOSIS.md").write_text("my notes\n")
    (ws / "scratch.py").write_text("mine\n")
    one_line_error(invoke("reset", cwd=ws), "add --yes to confirm")
    assert (ws / "train.py").read_text() == "my fix\n"
    p = invoke("reset", "--yes", "--json", cwd=ws)
    assert p.code == 0, p.err
    out = json.loads(p.out)
    backup = Path(out["backup"])
    assert "train.py" in out["restored"] and backup.parent == ws / ".trainwreck-backups"
    assert (backup / "train.py").read_text() == "my fix\n"
    assert (ws / "train.py").read_text() == shipped
    assert (ws / "DIAGNOSIS.md").read_text() == "my notes\n" and (ws / "scratch.py").exists()
    assert state(ws)["resets"] == [{"at": state(ws)["resets"][0]["at"], "backup": str(backup.relative_to(ws))}]
    p = invoke("reset", "--yes", cwd=ws)
    assert p.code == 0 and "nothing to reset" in p.out and len(state(ws)["resets"]) == 1


# ---- list: progress from each workspace's state file ----
def test_list_shows_progress_and_survives_a_deleted_workspace(invoke, tmp_path, ws, monkeypatch):
    import shutil

    before = json.loads(invoke("list", "--json").out)
    fake_grading(monkeypatch, {"completes": True, "memory_flat": False}, throughput=True)
    assert invoke("grade", cwd=ws).code == 1
    invoke("hint", cwd=ws)
    assert invoke("start", "lr-scaling", "--dir", str(tmp_path / "gone")).code == 0
    shutil.rmtree(tmp_path / "gone")
    p = invoke("list", "--json")
    assert p.code == 0 and f"practice workspace {tmp_path / 'gone'} no longer exists" in p.err
    out = json.loads(p.out)
    assert set(out) == {"exercises", "errors", "practice"}
    old_keys = {"slug", "kind", "title", "difficulty", "minutes", "topics", "symptom"}
    assert all(old_keys | {"progress"} == set(e) for e in out["exercises"])
    assert [e["slug"] for e in out["exercises"]] == [e["slug"] for e in before["exercises"]]
    (row,) = out["practice"]
    assert row == {"workspace": str(ws), "exercise": SLUG, "kind": "script", "passed": False,
                   "passed_at": None, "attempts": 1, "hints_used": 1, "hints_total": 3, "best_throughput": 0.8,
                   "solution": None}
    progress = {e["slug"]: e["progress"] for e in out["exercises"]}
    assert progress[SLUG] == {"workspaces": 1, "passed": False, "attempts": 1, "hints_used": 1,
                              "best_throughput": 0.8}
    assert progress["lr-scaling"] is None
    p = invoke("list")
    assert p.code == 0 and "attempted" in p.out and "1/3" in p.out and "0.80" in p.out
    assert "no longer exists" not in invoke("list").err  # dropped once


def test_a_corrupt_registry_is_a_warning_for_list_an_error_for_start_and_no_matter_inside(invoke, tmp_path, ws,
                                                                                          home):
    (home / "practice" / "workspaces.json").write_text("nope")
    p = invoke("list", "--json")
    assert p.code == 0 and "workspaces.json" in p.err and json.loads(p.out)["practice"] == []
    one_line_error(invoke("start", SLUG, "--dir", str(tmp_path / "w")), "workspaces.json", "delete it")
    assert not (tmp_path / "w").exists()
    assert invoke("hint", cwd=ws).code == 0
    (home / "practice" / "workspaces.json").unlink()  # the fix the message gives
    assert invoke("hint", cwd=ws).code == 0  # registers the workspace again
    assert [r["workspace"] for r in json.loads(invoke("list", "--json").out)["practice"]] == [str(ws)]


# ---- a design scenario: started with its brief and data, scored by an interviewer ----
def test_a_scenario_can_be_started_and_says_the_interviewer_scores_it(invoke, tmp_path):
    ws = tmp_path / "sc"
    p = invoke("start", "cost-efficiency", "--dir", str(ws))
    assert p.code == 0, p.err
    assert {"BRIEF.md", "CONSTRAINTS.md", "data/prices.toml"} <= files(ws) and "exercise.toml" not in files(ws)
    assert "interviewer scores it" in p.out and "hand in:" in p.out
    for args in (["grade"], ["watch"], ["run"]):
        one_line_error(invoke(*args, cwd=ws), "design scenario", "interviewer")
    one_line_error(invoke("hint", cwd=ws), "has no hints")
    one_line_error(invoke("solution", cwd=ws), "--reveal")
    p = invoke("solution", "--reveal", "--yes", cwd=ws)
    assert p.code == 0 and p.out.strip() and state(ws)["solution_revealed"] is True


# ---- the grading stops when its run is interrupted (watch's cancel relies on it) ----
def test_an_interrupted_run_stops_the_grading(monkeypatch, tmp_path):
    from grader import grade

    monkeypatch.setattr(grade, "launch", lambda cfg: SimpleNamespace(status="interrupted"))
    with pytest.raises(KeyboardInterrupt):
        grade.run_role(find(SLUG), kit_root() / "exercises" / SLUG, tmp_path / "run", "main", "cpu", 2)


# ---- run inside a workspace: the workspace's script, as the grader runs it ----
@pytest.mark.slow
def test_run_inside_a_workspace_launches_its_script_with_the_manifests_settings(tmp_path, home):
    import subprocess

    from tests.grader.commands.practice_fakes import TW, marked_workspace

    slug = "amp-no-scaler"
    ws = tmp_path / "ws"
    env = marked_workspace(slug, ws, home)
    p = subprocess.run([*TW, "run", "--json"], cwd=ws / "logs", env=env, capture_output=True, text=True, timeout=170)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    m = find(slug).manifest
    assert out["status"] == "ok" and out["world_size"] == m.world_size
    run = json.loads((Path(out["run_dir"]) / "run.json").read_text())
    assert run["config"]["script"] == str(ws / "train.py") and Path(out["run_dir"]).parent == ws / "runs"
    assert run["config"]["timeout"] == m.run.timeout and run["config"]["hang_timeout"] == m.run.hang_timeout
    assert "workspace copy ran" in (Path(out["run_dir"]) / "ranks" / "0" / "stdout.log").read_text()


def test_finding_a_workspace_loads_neither_pydantic_nor_the_grading_modules():
    from tests.test_boundaries import GRADING, _modules_after

    mods = _modules_after("from grader.practice.state import find_root, load\nfind_root('.')")
    assert "grader.practice.state" in mods and not [m for m in mods if m.startswith(GRADING)]
