"""Kill faults performed by the parent: at the point the rank marks, or as soon as it is seen past
its step without marking it, and only in the planned attempt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from harness import rundir
from harness.injector import FaultInjector
from harness.launch import Fault, LaunchConfig, launch
from tests.conftest import FIXTURES, assert_nothing_left


@dataclass
class View:
    attempt: int = 0
    pid: int | None = 100
    steps: int = 0
    exited: bool = False
    marked: dict[str, Any] | None = None


@dataclass
class Killer:
    pids: list[int] = field(default_factory=list)

    def __call__(self, pid: int) -> int:
        self.pids.append(pid)
        return 2


def injector(*plans: Fault) -> tuple[FaultInjector, Killer]:
    k = Killer()
    return FaultInjector(list(plans), kill=k, clock=lambda: 5.0), k


def test_a_marked_point_is_killed_once():
    inj, k = injector(Fault(rank=1, step=5))
    ranks = {0: View(pid=10, steps=5), 1: View(pid=11, steps=5, marked={"attempt": 0, "step": 5})}
    [kill] = inj.poll(ranks)
    assert (kill.rank, kill.pid, kill.how, kill.seen_step, kill.t) == (1, 11, "marked", 5, 5.0)
    assert inj.poll(ranks) == [] and k.pids == [11]  # done: the restarted rank is not killed again


@pytest.mark.parametrize("steps, fired", [(5, False), (6, True)])
def test_a_rank_past_its_step_without_marking_it_is_killed_overdue(steps, fired):
    inj, k = injector(Fault(rank=0, step=5))
    out = inj.poll({0: View(steps=steps)})
    assert [x.how for x in out] == (["overdue"] if fired else [])


@pytest.mark.parametrize("view", [
    View(attempt=1, steps=9, marked={"attempt": 1}),  # another attempt than planned
    View(pid=None, steps=9),                          # no process attributed yet
    View(exited=True, steps=9),                       # gone already
    View(steps=9, marked={"attempt": 1}),             # a mark from another attempt
])
def test_not_killed(view):
    inj, k = injector(Fault(rank=0, step=5, when="save"))
    assert inj.poll({0: view}) == [] and k.pids == []


def test_a_save_fault_is_never_overdue():
    inj, _ = injector(Fault(rank=0, step=5, when="save"))
    assert inj.poll({0: View(steps=50)}) == []  # no write reached: the checks that need the restart fail it


@pytest.mark.slow
def test_a_rank_that_disarms_its_fault_is_killed_from_outside(tmp_path):
    res = launch(LaunchConfig(script=FIXTURES / "disarm_fault.py", run_dir=tmp_path / "run", cwd=tmp_path,
                              faults=[Fault(rank=1, step=5)]))
    assert_nothing_left(tmp_path / "run")
    assert res.status == "failed"
    [kill] = rundir.load_run(res.run_dir)["faults_injected"]
    assert kill["how"] == "overdue" and kill["rank"] == 1 and kill["seen_step"] > 5
    assert next(r for r in res.to_json()["ranks"] if r["rank"] == 1)["exit_code"] == -9
