"""Grading where the sandbox cannot run (issue 11), through the CLI, in-process and without
launching: every grading command refuses with one line naming the fix, unless --no-sandbox, and
then result.json and every summary say the grade was unisolated; with the sandbox, a grading asks
the launcher for it in every role."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader import sealing, throughput
from grader.checks import REGISTRY
from grader.errors import EXIT_USAGE
from grader.evidence import load_run
from grader.exercises import find
from grader.grade import GradeOptions, grade, plan
from grader.result import GradeResult
from grader.roles import Role
from harness import sandbox
from harness.executor import Plain
from tests.grader.rundirs import RunDirBuilder

SLUG = "memory-leak"
NO_BWRAP = sandbox.Probe(False, sandbox.NOT_INSTALLED)


# ---- refused where the sandbox cannot run -----------------------------------------------------

@pytest.fixture
def no_bwrap(monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda: NO_BWRAP)


@pytest.fixture
def workspace(tmp_path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "train.py").write_text((find(SLUG).dir / "train.py").read_text())
    return ws


@pytest.mark.parametrize("args", [
    ["grade", SLUG, "--solution"],
    ["grade", SLUG, "--broken", "--json"],
    ["grade", SLUG, "--workspace", "{ws}"],
    ["verify", SLUG],
    ["demo", SLUG],
])
def test_grading_refuses_with_one_line_naming_the_fix(invoke, tmp_path, no_bwrap, workspace, args):
    out = tmp_path / "out"
    args = [a.replace("{ws}", str(workspace)) for a in args]
    if args[0] in ("grade",):
        args += ["--out", str(out)]
    if args[0] == "verify":
        args += ["--out", str(out)]
    p = invoke(*args, cwd=tmp_path)
    assert p.code == 2, (p.out, p.err)
    lines = p.err.strip().splitlines()
    assert lines[-1].startswith("error:") and "apt-get install bubblewrap" in lines[-1] and "--no-sandbox" in lines[-1]
    assert "Traceback" not in p.err and not out.exists()


def test_practice_and_session_gradings_refuse_too(invoke, tmp_path, no_bwrap, monkeypatch):
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path / "home"))
    assert invoke("start", SLUG, "--dir", str(tmp_path / "practice")).code == 0
    p = invoke("grade", cwd=tmp_path / "practice")
    assert p.code == 2 and "apt-get install bubblewrap" in p.err, p.err

    from grader.sessions.lifecycle import new_session
    from grader.sessions.store import Store

    store = Store.open(tmp_path / "s.db")
    _, (sx,) = new_session(store, "Ada", [SLUG], root=tmp_path / "session")
    p = invoke("grade", cwd=sx.workspace)
    assert p.code == 2 and "apt-get install bubblewrap" in p.err, p.err


def _fake_runs(monkeypatch, tmp_path, seen: list):
    def fake_run_role(ex_, script_dir, run_dir, role, device, nproc, script=None, executor=Plain(), **kw):
        seen.append((role, executor.sandboxed))
        b = RunDirBuilder(run_dir, world_size=nproc)
        for r in range(nproc):
            b.exit(r)
        b.build()
        sealing.seal(run_dir)
        return load_run(role, Path(run_dir))

    def fake_reference(ex_, device, nproc, progress, executor=Plain(), notes=None):
        seen.append(("reference", executor.sandboxed))
        return fake_run_role(ex_, None, tmp_path / "ref", "reference", device, nproc, executor=executor)

    monkeypatch.setattr("grader.grade.run_role", fake_run_role)
    monkeypatch.setattr("grader.grade.reference_run", fake_reference)


def roles_of(ex) -> set[str]:
    """Every role a grading of ``ex`` launches, from the grading's own plan: its runs, the
    reference, and the throughput roles where a check measures."""
    m = ex.manifest
    todo = plan(m)
    roles = set(todo.runs) | ({Role.REFERENCE} if todo.reference else set())
    if any(REGISTRY[spec.name].measure is not None for spec in m.checks):
        roles |= set(throughput.ROLES) | ({throughput.BOUND} if m.throughput and m.throughput.bound else set())
    return roles


def test_no_sandbox_grades_unisolated_and_every_summary_says_so(invoke, tmp_path, no_bwrap, monkeypatch):
    seen: list = []
    _fake_runs(monkeypatch, tmp_path, seen)
    monkeypatch.setattr("grader.console.out.width", 400)
    p = invoke("grade", SLUG, "--solution", "--no-sandbox", "--out", str(tmp_path / "out"), cwd=tmp_path)
    res = GradeResult.read(tmp_path / "out")
    # the fake runs make no steps, and the fake reference carries no parameter fingerprints, which
    # trajectory lays at the environment's door: a grade that says the environment failed
    assert p.code == EXIT_USAGE and res.environment_failure and not res.passed, p.err
    assert [c.name for c in res.checks if c.environment] == ["trajectory"]
    assert "Traceback" not in p.err
    assert {role for role, _ in seen} == roles_of(find(SLUG)) and not any(sandboxed for _, sandboxed in seen), seen
    assert res.isolation.kind == "none" and "--no-sandbox" in res.isolation.reason
    assert "bubblewrap not installed" in res.isolation.reason
    assert "isolation: NONE" in p.out and "UNISOLATED" in p.out
    assert "unisolated" in p.err  # the warning before anything runs


@pytest.mark.parametrize("slug", [
    SLUG,  # main and the reference
    "checkpoint-resume",  # runs killed and restarted
    "comm-bound",  # the throughput rounds: broken, candidate, reference, the compute bound
])
def test_a_sandboxed_grading_asks_the_sandbox_for_every_role(tmp_path, monkeypatch, slug):
    """What the grading asks of the launcher (run_role's ``executor``) for each role it launches; that
    a launch asked for the sandbox runs in it is tests/harness/test_launch_sandboxed.py's to prove."""
    monkeypatch.setattr(sandbox, "probe", lambda: sandbox.Probe(True, "", "setuid"))
    seen: list = []
    _fake_runs(monkeypatch, tmp_path, seen)
    res = grade(find(slug), GradeOptions(kind="solution", out_dir=tmp_path / "out"))
    assert {role for role, _ in seen} == roles_of(find(slug)) and all(sandboxed for _, sandboxed in seen), seen
    assert res.isolation.kind == "sandbox" and res.isolation.uid == sandbox.SANDBOX_UID and res.sealed


def test_out_inside_the_kit_is_refused_for_a_sandboxed_grading(tmp_path, monkeypatch):
    from grader.errors import UserError
    from harness.launch import KIT_ROOT

    monkeypatch.setattr(sandbox, "probe", lambda: sandbox.Probe(True, "", "setuid"))
    with pytest.raises(UserError, match="inside the kit"):
        grade(find(SLUG), GradeOptions(kind="solution", out_dir=KIT_ROOT / "runs" / "x"))
    assert not (KIT_ROOT / "runs" / "x").exists()


def test_run_sandbox_refuses_where_it_cannot_run_and_names_its_own_fix(invoke, tmp_path, no_bwrap):
    from tests.conftest import FIXTURES

    p = invoke("run", "--sandbox", str(FIXTURES / "ddp_ok.py"), "--run-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert p.code == 2 and "apt-get install bubblewrap" in p.err and "run without --sandbox" in p.err, p.err
    assert not (tmp_path / "r").exists()


def test_run_sandbox_refuses_a_run_dir_inside_the_kit(invoke, tmp_path):
    from harness.launch import KIT_ROOT
    from tests.conftest import FIXTURES

    p = invoke("run", "--sandbox", str(FIXTURES / "ddp_ok.py"), "--run-dir", str(KIT_ROOT / "runs" / "x"), cwd=tmp_path)
    assert p.code == 2 and "inside the kit" in p.err, p.err
    assert not (KIT_ROOT / "runs" / "x").exists()
