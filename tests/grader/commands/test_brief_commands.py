"""Every command a brief or a hint prints works where it is printed (issue 26 item 3): in a practice
workspace (`trainwreck start`), in a session workspace (`trainwreck session new`) and in the
candidate bundle. Each command is taken from the text (grader.bundle.commands), run through the
real CLI in each context with the launch or the grading replaced by a recorder, and must target the
candidate's copy; `show` and `calc` run for real. Two real launches close it (slow)."""

from __future__ import annotations

import importlib.util
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from grader.bundle.build import build
from grader.bundle.commands import commands, for_bundle, in_bundle
from grader.exercises import discover, find
from tests.grader.commands.practice_fakes import TW, marked_workspace

EXERCISES = discover()[0]
SCRIPTS = sorted(e.slug for e in EXERCISES if e.kind == "script")
ALL = sorted(e.slug for e in EXERCISES)


class Launched(Exception):
    """Raised by the recorder in place of a launch or a grading: what it would have run."""


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TRAINWRECK_DB", raising=False)
    return tmp_path / "home"


def printed(slug: str, hints: bool = True) -> list[str]:
    """The commands ``slug``'s brief prints, and its hints' where the context shows hints."""
    ex = find(slug)
    out = commands(ex.brief.read_text(encoding="utf-8"))
    if hints:
        for h in getattr(ex.manifest, "hints", []):
            out += commands(h)
    return out


def test_every_brief_and_hint_prints_commands_and_only_the_kits():
    for slug in ALL:
        cmds = printed(slug)
        assert cmds or slug not in SCRIPTS, slug
        assert all(shlex.split(c)[0] == "trainwreck" for c in cmds), (slug, cmds)
    # nothing left that only works where the candidate substitutes a placeholder
    everything = " ".join(c for s in ALL for c in printed(s))
    assert "DIR" not in everything and "path/to" not in everything


def practice(invoke, tmp_path, slug) -> Path:
    r = invoke("start", slug, "--dir", str(tmp_path / "P"))
    assert r.code == 0, r.err
    return tmp_path / "P"


def session(invoke, tmp_path, slug) -> Path:
    r = invoke("session", "new", "--candidate", "Ann", "--exercise", slug, "--dir", str(tmp_path / "S"), "--json")
    assert r.code == 0, r.err
    return tmp_path / "S" / slug


def recorders(monkeypatch) -> list:
    """Replace the launch of `run` and the gradings of `grade` (practice and session) with a
    recorder of their target."""
    import grader.commands.run as run_cmd
    import grader.practice.grading as practice_grading
    import grader.sessions.attempts as attempts

    seen: list = []

    def record(what):
        seen.append(what)
        raise SystemExit(0)

    monkeypatch.setattr(run_cmd, "launch", lambda cfg, **kw: record(("run", cfg)))
    monkeypatch.setattr(practice_grading, "grade_workspace", lambda ws, **kw: record(("grade", ws.root)))
    monkeypatch.setattr(attempts, "record_attempt", lambda marker, **kw: record(("grade", marker.dir)))
    return seen


def check_in_workspace(invoke, monkeypatch, ws: Path, slug: str, cmd: str, subdir: Path | None = None) -> None:
    seen = recorders(monkeypatch)
    ex = find(slug)
    args = shlex.split(cmd)[1:]
    r = invoke(*args, cwd=subdir or ws)
    assert r.code == 0, (slug, cmd, r.err)
    if args[0] == "run":
        (what, cfg), = seen
        assert Path(cfg.script).resolve() == (ws / ex.manifest.entry).resolve(), (slug, cmd)
        assert Path(cfg.run_dir).resolve().parent == (ws / "runs").resolve()
        if "--nproc" in args:
            assert cfg.nproc == int(args[args.index("--nproc") + 1])
        else:
            assert cfg.nproc == ex.manifest.world_size
        for opt, attr in (("--hang-timeout", "hang_timeout"), ("--max-restarts", "max_restarts")):
            if opt in args:
                assert getattr(cfg, attr) == float(args[args.index(opt) + 1])
        assert cfg.profile == ("--profile" in args)
    elif args[0] == "grade":
        assert seen == [("grade", ws.resolve())], (slug, cmd, seen)
    else:  # show, calc: nothing to launch
        assert not seen and r.out.strip(), (slug, cmd)


@pytest.mark.parametrize("slug", ALL)
def test_in_a_practice_workspace_each_command_targets_the_candidates_copy(invoke, tmp_path, monkeypatch, slug):
    ws = practice(invoke, tmp_path, slug)
    for cmd in printed(slug):
        if find(slug).kind == "scenario" and shlex.split(cmd)[1] in ("run", "grade"):
            continue  # a design brief prints no such command
        check_in_workspace(invoke, monkeypatch, ws, slug, cmd)
    if find(slug).kind == "script":  # typed in a folder of the workspace too
        check_in_workspace(invoke, monkeypatch, ws, slug, f"trainwreck run {slug}", subdir=ws / "logs")


@pytest.mark.parametrize("slug", SCRIPTS)
def test_in_a_session_workspace_each_command_targets_the_candidates_copy(invoke, tmp_path, monkeypatch, slug):
    ws = session(invoke, tmp_path, slug)
    for cmd in printed(slug):
        check_in_workspace(invoke, monkeypatch, ws, slug, cmd)


def test_a_slug_of_another_exercise_still_runs_that_exercises_shipped_script(invoke, tmp_path, monkeypatch):
    ws = practice(invoke, tmp_path, "memory-leak")
    seen = recorders(monkeypatch)
    assert invoke("run", "lr-scaling", cwd=ws).code == 0
    (_, cfg), = seen
    assert Path(cfg.script) == find("lr-scaling").script


def load(path: Path, monkeypatch):
    """A bundle's run.py or selfcheck.py as a module (its sys.path change undone after the test)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location(f"bundle_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bundle") / "b"
    build(ALL, root)
    return root


@pytest.mark.parametrize("slug", ALL)
def test_in_the_bundle_each_command_is_the_bundles_and_targets_the_candidates_copy(bundle, monkeypatch, tmp_path,
                                                                                    slug):
    monkeypatch.chdir(tmp_path)  # run.py makes its default run dir (runs/...) under the cwd before launching
    text = (bundle / "exercises" / slug / "BRIEF.md").read_text(encoding="utf-8")
    assert text == for_bundle(find(slug).brief.read_text(encoding="utf-8"), slug)
    run, selfcheck = load(bundle / "run.py", monkeypatch), load(bundle / "selfcheck.py", monkeypatch)
    seen: list = []

    def record(what):
        seen.append(what)
        raise Launched

    monkeypatch.setattr(run, "launch", lambda cfg: record(cfg))
    monkeypatch.setattr(selfcheck, "judge_all", lambda spec, raw, folder, out: record(folder))
    for cmd in commands(text):
        words = shlex.split(cmd)
        if words[0] == "trainwreck":  # a kit command: said to be the kit's, never offered to type here
            assert f"`{cmd}` (in the kit; not in this bundle)" in text, (slug, cmd)
            continue
        assert words[:2] in (["python", "run.py"], ["python", "selfcheck.py"]), (slug, cmd)
        assert (bundle / words[1]).is_file()
        seen.clear()
        with pytest.raises(Launched):
            (run if words[1] == "run.py" else selfcheck).main(words[2:])
        mine = bundle / "exercises" / slug
        if words[1] == "run.py":
            assert seen[0].script == mine / find(slug).manifest.entry, (slug, cmd)
            if "--nproc" in words:
                assert seen[0].nproc == int(words[words.index("--nproc") + 1])
        else:
            assert seen == [mine], (slug, cmd)


def test_bundle_forms_of_the_kits_commands():
    assert in_bundle("trainwreck run memory-leak --nproc 1", "memory-leak") == "python run.py memory-leak --nproc 1"
    assert in_bundle("trainwreck run train.py --profile", "memory-leak") == "python run.py memory-leak --profile"
    assert in_bundle("trainwreck run", "memory-leak") == "python run.py memory-leak"
    assert in_bundle("trainwreck grade memory-leak --workspace .", "memory-leak") == "python selfcheck.py memory-leak"
    assert in_bundle("trainwreck show memory-leak", "memory-leak") is None


# ---- real launches: one in a practice workspace, one in the bundle ----
@pytest.mark.slow
def test_the_briefs_run_launches_the_workspace_copy(tmp_path, home):
    slug = "lr-scaling"
    ws = tmp_path / "ws"
    env = marked_workspace(slug, ws, home)
    cmd = next(c for c in printed(slug) if "--nproc 1" in c)
    p = subprocess.run([*TW, *shlex.split(cmd)[1:], "--json"], cwd=ws, env=env, capture_output=True, text=True,
                       timeout=170)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["world_size"] == 1 and "not the shipped one" in p.stderr
    assert "workspace copy ran" in (Path(out["run_dir"]) / "ranks" / "0" / "stdout.log").read_text()


@pytest.mark.slow
def test_the_bundles_run_launches_the_candidates_copy(tmp_path):
    slug = "lr-scaling"
    build([slug], tmp_path / "b")
    mine = tmp_path / "b" / "exercises" / slug / "train.py"
    mine.write_text(mine.read_text() + "\nprint('bundle copy ran')\n")
    text = (tmp_path / "b" / "exercises" / slug / "BRIEF.md").read_text()
    cmd = next(c for c in commands(text) if "--nproc 1" in c)
    p = subprocess.run([sys.executable, *shlex.split(cmd)[1:], "--json"], cwd=tmp_path / "b", capture_output=True,
                       text=True, timeout=170)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["world_size"] == 1
    assert "bundle copy ran" in (Path(out["run_dir"]) / "ranks" / "0" / "stdout.log").read_text()
