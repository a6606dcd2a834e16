"""world_size_equivalence on hand-built final parameters at world sizes 2 (main) and 1."""

from __future__ import annotations

import pytest
import torch

from grader.checks import Context, run_check
from grader.evidence import load_run
from grader.roles import Role, RunRequest
from tests.grader.builders import make_run
from tests.grader.fakes import FakeManifest, spec


def _p(v: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((3,), v)}


@pytest.mark.parametrize("ws2, ws1, passed, says", [
    (1.0, 1.0, True, "world sizes 1, 2 end at the same parameters"),
    (1.0, 1.0 + 5e-6, True, "world sizes 1, 2 end at the same parameters"),
    (1.0, 1.5, False, "run at world size 2, the script ends at different parameters from world size 1"),
])
def test_world_size_equivalence(tmp_path, ws2, ws1, passed, says):
    runs = {"main": load_run("main", make_run(tmp_path / "main", params={0: _p(ws2), 1: _p(ws2)})),
            "ws1": load_run("ws1", make_run(tmp_path / "ws1", world_size=1, params={0: _p(ws1)}))}
    c = run_check(spec("world_size_equivalence", world_sizes=[1, 2], atol=1e-5), Context(FakeManifest(), runs))
    assert c.passed is passed and says in c.message, c.message


def test_it_asks_for_a_run_at_each_other_world_size():
    check_spec = spec("world_size_equivalence", world_sizes=[1, 2, 4])
    from grader.checks.world_size_equivalence import runs

    assert runs(check_spec, FakeManifest()) == [RunRequest(Role.WORLD_SIZE, 1), RunRequest(Role.WORLD_SIZE, 4)]
    assert [r.name for r in runs(check_spec, FakeManifest())] == ["ws1", "ws4"]


def test_a_missing_world_size_run_cannot_be_judged(tmp_path):
    runs = {"main": load_run("main", make_run(tmp_path / "main", params={0: _p(1.0), 1: _p(1.0)}))}
    c = run_check(spec("world_size_equivalence"), Context(FakeManifest(), runs))
    assert not c.passed and c.environment and "no ws1 run" in c.message
