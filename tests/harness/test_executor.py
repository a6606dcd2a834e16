"""``harness.executor``: the launcher runs its command only through the executor it is handed
(wrapped, watched and cleaned up there), and records what that executor says. A fake executor
stands in for both real ones: its "launcher" is a small Python process, so nothing here needs
torch or bubblewrap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import psutil
import pytest

from harness import rundir, sandbox
from harness.errors import LaunchError
from harness.executor import Plain, RunSpec, Sandboxed, executor_for
from harness.launch import KIT_ROOT, LaunchConfig, launch
from harness.limits import Limits, Violation
from harness.proctree import ProcessTree
from tests.conftest import FIXTURES

MARK = "TRAINWRECK_TEST_WRAPPED"


class FakeRun:
    def __init__(self, owner: FakeExecutor, spec: RunSpec, argv: list[str]):
        self.owner, self.spec, self.argv = owner, spec, argv

    def environ(self, env: dict[str, str]) -> None:
        self.owner.calls.append("environ")
        env[MARK] = "1"

    def start_store(self, conf, cwd):  # pragma: no cover - no launch here runs a store
        raise AssertionError("no store was asked for")

    def spawn(self, cmd: list[str], env: dict[str, str], cwd: Path) -> psutil.Popen:
        """Wraps the launcher's command: runs ``argv`` instead, with the command it was given as
        its arguments, and records both."""
        self.owner.calls.append("spawn")
        self.owner.wrapped = cmd
        self.owner.env = env
        return psutil.Popen([*self.argv, *cmd], env=env, stdin=subprocess.PIPE, cwd=cwd,
                            start_new_session=True)

    def poll(self, tree: ProcessTree) -> Violation | None:
        self.owner.calls.append("poll")
        return self.owner.violation

    def close(self) -> dict[str, Any] | None:
        self.owner.calls.append("close")
        return {"isolated": True, "by": "the fake"}


class FakeExecutor:
    sandboxed: ClassVar[bool] = True

    def __init__(self, argv: list[str], violation: Violation | None = None):
        self.argv, self.violation = argv, violation
        self.calls: list[str] = []
        self.spec: RunSpec | None = None
        self.wrapped: list[str] = []
        self.env: dict[str, str] = {}

    def validate(self, cwd, nnodes) -> None:
        self.calls.append("validate")

    def refusal(self) -> str | None:
        return None

    def prepare(self, spec: RunSpec) -> FakeRun:
        self.calls.append("prepare")
        self.spec = spec
        return FakeRun(self, spec, self.argv)

    def describe(self):  # pragma: no cover - the grader's, not the launcher's
        raise AssertionError


EXITS = [sys.executable, "-c", "import sys; sys.stdin.read()"]  # reads torchrun's options, exits 0
SLEEPS = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_the_executor_handed_to_launch_wraps_runs_and_closes_the_command(tmp_path):
    fake = FakeExecutor(EXITS)
    res = launch(LaunchConfig(script=FIXTURES / "ddp_ok.py", run_dir=tmp_path / "run", cwd=tmp_path / "work",
                              executor=fake), poll_s=0.05)
    assert res.status == "ok" and res.exit_code == 0
    assert fake.calls[:4] == ["validate", "prepare", "environ", "spawn"] and fake.calls[-1] == "close"
    assert fake.calls.count("close") == 1
    assert fake.wrapped == [sys.executable, "-m", "harness.agent"]  # the launcher's command, as given
    assert fake.env[MARK] == "1" and rundir.KEY_ENV not in fake.env  # the key is the executor's to give
    assert fake.spec is not None and fake.spec.cwd == (tmp_path / "work").resolve()
    assert fake.spec.run_dir == (tmp_path / "run").resolve() and fake.spec.kit_root == KIT_ROOT
    run_json = rundir.load_run(tmp_path / "run")
    assert run_json["sandbox"] == {"isolated": True, "by": "the fake"} and run_json["sandboxed"] is True
    assert run_json["config"]["sandbox"] is True and "executor" not in run_json["config"]


def test_a_limit_the_executor_sees_ends_the_run_and_everything_of_it(tmp_path):
    fake = FakeExecutor(SLEEPS, violation=Violation("processes", 70, 64))
    res = launch(LaunchConfig(script=FIXTURES / "ddp_ok.py", run_dir=tmp_path / "run", cwd=tmp_path / "work",
                              executor=fake, timeout=30), poll_s=0.05)
    assert res.status == "limit" and res.limit is not None and res.limit["what"] == "processes"
    assert "poll" in fake.calls and fake.calls[-1] == "close"
    assert res.wall_s < 20  # ended at the first look, not by the time limit


def test_a_plain_launch_records_that_it_was_not_isolated(tmp_path):
    plain = Plain().prepare(RunSpec(kit_root=KIT_ROOT, run_dir=tmp_path, key="k" * 32, cwd=tmp_path,
                                    script=FIXTURES / "ddp_ok.py", gpu=False, limits=Limits()))
    env: dict[str, str] = {}
    plain.environ(env)
    assert env == {rundir.KEY_ENV: "k" * 32}  # the ranks sign their own records
    assert plain.close() is None  # run.json then says {"isolated": false}


@pytest.mark.parametrize("cwd, nnodes, match", [
    (None, 1, "needs a work dir"),
    (Path("/tmp/w"), 2, "loopback networking only"),
])
def test_the_sandboxed_executor_refuses_what_it_cannot_run(cwd, nnodes, match):
    with pytest.raises(LaunchError, match=match):
        Sandboxed().validate(cwd, nnodes)
    Plain().validate(cwd, nnodes)  # as torchrun: anything goes


def test_one_factory_chooses_and_the_choice_describes_itself(monkeypatch):
    monkeypatch.setattr(sandbox, "probe", lambda: sandbox.Probe(False, "bubblewrap not installed: apt-get it"))
    assert isinstance(executor_for(sandboxed=True), Sandboxed) and isinstance(executor_for(sandboxed=False), Plain)
    assert executor_for(sandboxed=True).refusal() == "bubblewrap not installed: apt-get it"
    assert executor_for(sandboxed=False).refusal() is None
    plain = executor_for(sandboxed=False).describe()
    assert plain.kind == "none" and plain.reason == "graded with --no-sandbox; bubblewrap not installed on this machine"
    monkeypatch.setattr(sandbox, "probe", lambda: sandbox.Probe(True, "", "setuid"))
    boxed = executor_for(sandboxed=True).describe()
    assert (boxed.kind, boxed.mode, boxed.uid) == ("sandbox", "setuid", sandbox.SANDBOX_UID)
    assert executor_for(sandboxed=False).describe().reason == "graded with --no-sandbox"
