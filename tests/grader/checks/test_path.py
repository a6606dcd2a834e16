"""What a restart may lose: the checkpoint interval, and the steps a torn write was in flight."""

from __future__ import annotations

from types import SimpleNamespace

from grader.checks._path import _torn_step
from grader.evidence.saves import FileOp


def op(step, attempt=0, t_end=None, kind="bytes", rank=0):
    return FileOp(rank=rank, attempt=attempt, seq=step, op=kind, path=f"/w/c{step}", src=None, step=step,
                  main=True, t_begin=float(step), t_end=t_end)


def test_the_torn_write_is_the_earliest_unfinished_one_of_the_first_attempt():
    ev = SimpleNamespace(file_ops=[op(40, t_end=41.0), op(48), op(56, rank=1), op(3, attempt=1),
                                   op(47, kind="rename")])
    assert _torn_step(ev) == 48  # finished writes, later attempts and renames are not writes torn by the kill


def test_no_torn_write():
    assert _torn_step(SimpleNamespace(file_ops=[op(40, t_end=41.0)])) is None


def test_a_restart_counts_only_after_the_parent_killed_a_rank():
    from grader.checks._path import not_killed

    planned = {"config": {"faults": [{"rank": 1, "step": 20, "when": "step"}]}}
    assert "never killed a rank" in not_killed(SimpleNamespace(run={**planned, "faults_injected": []}), "resume")
    assert "rank 1 after step 20" in not_killed(SimpleNamespace(run={**planned, "faults_injected": []}), "resume")
    killed = {**planned, "faults_injected": [{"rank": 1, "how": "marked"}]}
    assert not_killed(SimpleNamespace(run=killed), "resume") is None
    assert not_killed(SimpleNamespace(run=planned), "resume") is None  # a run made before the parent killed
    # the parent's record of a bypassed kill it could not perform (the rank had ended): no kill
    missed = {**planned, "faults_injected": [{"rank": 1, "how": "overdue", "killed": 0}]}
    assert "never killed a rank" in not_killed(SimpleNamespace(run=missed), "resume")
