"""The commands that launch nothing (list, show, and every command's bad input), in-process:
exit codes, one-line errors on stderr naming the problem and the fix, results on stdout."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO

GOOD = (REPO / "exercises" / "memory-leak" / "exercise.toml").read_text()


@pytest.mark.parametrize("args, says", [
    (["run", "no_such_script.py"], "script not found: no_such_script.py"),
    (["run", "no-such-exercise"], "no exercise 'no-such-exercise'"),
    (["run", str(FIXTURES / "ddp_ok.py"), "--nproc", "0"], "Invalid value for '--nproc'"),
    (["run", str(FIXTURES / "ddp_ok.py"), "--device", "tpu"], "Invalid value for '--device'"),
    (["run", str(FIXTURES / "ddp_ok.py"), "--nnodes", "2"], "--nnodes > 1 needs --rdzv-endpoint"),
    (["run", str(FIXTURES / "ddp_ok.py"), "--bogus"], "No such option '--bogus'"),
    (["run", str(FIXTURES / "ddp_ok.py"), "--profile=all"], "Option '--profile' does not take a value"),
    (["show", "nope"], "no exercise 'nope'"),
    (["grade", "memory-leak"], "give --workspace DIR"),
    (["grade", "memory-leak", "--workspace", "/nonexistent"], "is not a directory"),
    (["regrade", "/nonexistent/result.json"], "not found"),
])
def test_bad_input_is_one_line_and_exit_2(invoke, tmp_path, args, says):
    p = invoke(*args, cwd=tmp_path)
    assert p.code == 2, (p.out, p.err)
    lines = p.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], p.stderr
    assert "Traceback" not in p.err


def _home_with(tmp_path: Path, manifest: str, slug: str = "memory-leak") -> Path:
    home = tmp_path / "home"
    d = home / "exercises" / slug
    d.mkdir(parents=True)
    (d / "train.py").write_text("print('hi')\n")
    (d / "exercise.toml").write_text(manifest)
    return home


@pytest.mark.parametrize("edit, says", [
    (lambda s: s + "\n[[[", "not valid TOML"),
    (lambda s: s.replace('title = "Memory that only goes up"\n', ""), "title: Field required; add it"),
    (lambda s: s.replace("minutes = 45", "minutes = 45\ncolour = 'red'"), "colour: Extra inputs are not permitted; remove it"),
    (lambda s: s.replace("minutes = 45", 'minutes = "soon"'), "minutes: Input should be a valid integer"),
    (lambda s: s.replace('name = "memory_flat"', 'name = "memory_flatt"'), "checks[1]: Input tag 'memory_flatt'"),
    (lambda s: s.replace('slug = "memory-leak"', 'slug = "other"'), "slug: 'other' differs from its folder"),
    (lambda s: s.replace('editable = ["train.py"]', 'editable = ["train.py", "data.py"]'), "editable: 'data.py' is not a file"),
    (lambda s: s.replace('broken_fails = ["memory_flat"]', 'broken_fails = ["throughput"]'), "broken_fails names 'throughput'"),
    (lambda s: s.replace("format_version = 1", "format_version = 2"), "unsupported format_version 2"),
])
def test_malformed_manifest_names_file_field_and_fix(invoke, tmp_path, edit, says):
    broken = edit(GOOD)
    assert broken != GOOD, "the shipped manifest changed: update this edit"
    home = _home_with(tmp_path, broken)
    p = invoke("show", "memory-leak", env={"TRAINWRECK_KIT": str(home)})
    assert p.code == 2
    line = p.err.strip()
    assert "\n" not in line and str(home / "exercises" / "memory-leak" / "exercise.toml") in line and says in line, line


def test_list_shows_good_exercises_and_warns_about_bad_ones(invoke, tmp_path):
    home = _home_with(tmp_path, GOOD)
    bad = home / "exercises" / "broken-one"
    bad.mkdir()
    (bad / "exercise.toml").write_text("format_version = 1\n")
    p = invoke("list", env={"TRAINWRECK_KIT": str(home)})
    assert p.code == 0
    assert "memory-leak" in p.out and "broken-one" not in p.out
    assert "broken-one/exercise.toml" in p.err and "Field required" in p.err


def test_list_with_no_exercises(invoke, tmp_path):
    p = invoke("list", env={"TRAINWRECK_KIT": str(tmp_path)})
    assert p.code == 0 and "no exercises found" in p.out


def test_shipped_exercises_all_load(invoke):
    p = invoke("list")
    assert p.code == 0 and not p.err.strip(), p.err
    for slug in ("memory-leak", "sampler-replay", "collective-deadlock", "amp-no-scaler", "lr-scaling"):
        assert slug in p.out




def _workspace(tmp_path: Path, text: str | None) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    if text is not None:
        (ws / "train.py").write_text(text)
    return ws


@pytest.mark.parametrize("case, says", [
    ("not a folder", "is not a directory"),
    ("no train.py", "lacks train.py"),
    ("syntax error", "train.py, line 2: invalid syntax; fix the syntax and grade again"),
    ("non-empty --out", "already holds files (an earlier grading?); give --out a new or empty folder"),
    ("read-only --out", "cannot write grading results to"),
    ("train.py a symlink to the solution", "is a symlink to"),
    ("train.py a 20 MiB sparse file", "too large for a script"),
])
def test_grading_refuses_bad_input_before_running_anything(invoke, tmp_path, case, says):
    ws = _workspace(tmp_path, None if case in ("no train.py", "train.py a symlink to the solution")
                    else "import os\ndef broken(:\n" if case == "syntax error"
                    else (REPO / "exercises" / "memory-leak" / "train.py").read_text())
    if case == "train.py a 20 MiB sparse file":  # never read whole, compiled or hashed
        with open(ws / "train.py", "ab") as f:
            f.truncate(20 << 20)
    if case == "train.py a symlink to the solution":  # graded would be the reference, not the workspace
        (ws / "train.py").symlink_to(REPO / "solutions" / "memory-leak" / "train.py")
    out = tmp_path / "out"
    if case == "non-empty --out":
        out.mkdir()
        (out / "result.json").write_text("{}")
    if case == "read-only --out":
        out = Path("/proc/self/out")  # a place nobody can create a folder in, root or not
    args = ["grade", "memory-leak", "--workspace", str(tmp_path / "nope" if case == "not a folder" else ws),
            "--out", str(out)]
    p = invoke(*args, cwd=tmp_path)
    assert p.code == 2 and says in p.err and len(p.err.strip().splitlines()) == 1, p.err
    if case != "non-empty --out":
        assert not (tmp_path / "out").exists()  # nothing left behind by a rejected grading


def test_a_non_utf8_manifest_breaks_only_its_own_exercise(invoke, tmp_path):
    home = _home_with(tmp_path, GOOD)
    bad = home / "exercises" / "latin1"
    bad.mkdir()
    (bad / "exercise.toml").write_bytes('title = "caf\xe9"\n'.encode("latin-1"))
    p = invoke("list", env={"TRAINWRECK_KIT": str(home)})
    assert p.code == 0 and "memory-leak" in p.out
    assert "latin1/exercise.toml: not UTF-8 text" in p.err and "save it as UTF-8" in p.err
    p = invoke("show", "latin1", env={"TRAINWRECK_KIT": str(home)})
    assert p.code == 2 and "not UTF-8 text" in p.err and len(p.err.strip().splitlines()) == 1
