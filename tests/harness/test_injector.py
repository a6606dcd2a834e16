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


def events(*steps: int, attempt: Any = 0, fault: bool = False) -> list[dict[str, Any]]:
    recs: list[dict[str, Any]] = [{"kind": "boot", "attempt": attempt, "pid": 77}]
    recs += [{"kind": "step", "attempt": attempt, "step": s} for s in steps]
    return recs + ([{"kind": "fault", "attempt": attempt}] if fault else [])


@pytest.mark.parametrize("recs, missed", [
    (events(*range(1, 97)), True),            # past its step, never marked, ended between two polls
    (events(*range(1, 6)), False),            # never reached its step
    (events(*range(1, 97), fault=True), False),  # marked: the polls' business, never a miss
    (events(*range(1, 97), attempt=1), False),   # another attempt's steps
    (events(*range(1, 97), attempt=0.0), False),  # an attempt that is no int is no attempt's
])
def test_a_bypassed_kill_the_polls_missed_is_recorded_after_the_run(recs, missed):
    inj, k = injector(Fault(rank=1, step=45))
    out = inj.settle(lambda r: recs if r == 1 else [])
    assert k.pids == []  # nothing is killed after the run
    if missed:
        assert [(x.how, x.killed, x.seen_step, x.pid) for x in out] == [("overdue", 0, 96, 77)]
        assert inj.to_json()[0]["killed"] == 0 and inj.settle(lambda r: recs) == []  # once
    else:
        assert out == [] and inj.to_json() == []


def test_a_save_fault_is_never_settled_as_missed():
    inj, _ = injector(Fault(rank=0, step=5, when="save"))
    assert inj.settle(lambda r: events(*range(1, 50))) == []


@pytest.mark.slow
def test_a_rank_that_disarms_its_fault_is_killed_from_outside(tmp_path):
    res = launch(LaunchConfig(script=FIXTURES / "disarm_fault.py", run_dir=tmp_path / "run", cwd=tmp_path,
                              faults=[Fault(rank=1, step=5)]))
    assert_nothing_left(tmp_path / "run")
    assert res.status == "failed"
    [kill] = rundir.load_run(res.run_dir)["faults_injected"]
    assert kill["how"] == "overdue" and kill["rank"] == 1 and kill["seen_step"] > 5
    assert next(r for r in res.to_json()["ranks"] if r["rank"] == 1)["exit_code"] == -9
