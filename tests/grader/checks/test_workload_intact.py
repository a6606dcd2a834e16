"""workload_intact: steps, samples, distinct samples, world size, protected files, forged lines."""

from __future__ import annotations

import pytest
import torch

from grader.checks import Context, run_check
from grader.evidence import load_run
from tests.grader.fakes import FakeManifest, W, ctx_for, epochs, perm, spec


@pytest.mark.parametrize("kw, protected, passed, says", [
    ({"steps": 16, "ledgers": epochs([perm(0), perm(1)])}, [], True, "files as shipped"),
    ({"steps": 8, "ledgers": epochs([perm(0)])}, [], False, "made 8 optimizer steps"),
    ({"steps": 16, "ledgers": {0: perm(0)[:32] * 2, 1: perm(0)[32:] * 2}}, [], True, "files as shipped"),
    ({"steps": 16, "ledgers": {0: list(range(32)) * 2, 1: list(range(32)) * 2}}, [], False, "32 distinct samples"),
    ({"steps": 16, "ledgers": epochs([perm(0), perm(1)]), "world_size": 1}, [], False, "the exercise runs 2"),
    ({"steps": 16, "ledgers": epochs([perm(0), perm(1)])}, ["exercise.toml"], False, "protected files differ"),
])
def test_workload_intact(tmp_path, kw, protected, passed, says):
    kw = {**kw, "params": {r: {"w": torch.zeros(3)} for r in range(kw.get("world_size", W))}}
    ctx = ctx_for(tmp_path, main=kw)
    ctx.protected_changed = protected
    c = run_check(spec("workload_intact"), ctx)
    assert c.passed is passed and says in c.message, c.message


def test_workload_intact_fails_on_forged_records(tmp_path):
    ctx = ctx_for(tmp_path, main={"steps": 16, "ledgers": epochs([perm(0), perm(1)]),
                                  "params": {r: {"w": torch.zeros(3)} for r in range(W)}})
    with open(tmp_path / "main" / "ranks" / "0" / "samples.jsonl", "a") as f:
        f.write('{"a": 0, "ds": "train", "i": 5, "s": 0, "mac": "00000000000000000000000000000000"}\n')
        f.write('{"a": 0, "ds": "train", "i": 6, "s": 0}\n')
    ctx = Context(ctx.manifest, {"main": load_run("main", tmp_path / "main")})
    c = run_check(spec("workload_intact"), ctx)
    assert not c.passed and "2 record lines in the main run dir were not written by the harness" in c.message


def _eval_run(tmp_path, reads):
    """``reads``: (rank, step, indices) of the validation split."""
    from grader.manifest import Evaluation, Workload
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(tmp_path / "main")
    for r in range(W):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        for s in range(1, 17):
            b.event(r, kind="step", attempt=0, t=float(s), step=s, dt=0.01, rss_mb=1.0, lr=[0.1])
        b.exit(r, {"w": torch.zeros(3)}, t=20.0, steps=16)
        order = epochs([perm(0), perm(1)])[r]
        for i in order:
            b.sample(r, i)
    for rank, step, idx in reads:
        for i in idx:
            b.sample(rank, i, dataset="val", step=step)
    ctx = Context(FakeManifest(), {"main": load_run("main", b.build())})
    ctx.manifest.workload = Workload(dataset_size=64, global_batch=8, steps=16, params=3,
                                     evaluations={"val": Evaluation(count=2, samples=8)})
    return run_check(spec("workload_intact"), ctx)


@pytest.mark.parametrize("reads, passed, says", [
    ([(0, 8, range(4)), (1, 8, range(4, 8)), (0, 16, range(4)), (1, 16, range(4, 8))], True, "files as shipped"),
    ([(0, 8, range(8)), (0, 16, range(8))], True, "files as shipped"),   # rank 0 alone scores the whole split
    ([(0, 8, range(8)), (1, 8, range(8)), (0, 16, range(8)), (1, 16, range(8))], True, "files as shipped"),
    ([(0, 8, range(8))], False, "1 evaluations on 'val' were made; the workload makes 2"),
    ([(0, 8, range(4)), (0, 16, range(4))], False, "read 4 distinct samples over all ranks"),
])
def test_evaluations_are_judged_by_what_all_ranks_read_together(tmp_path, reads, passed, says):
    c = _eval_run(tmp_path, reads)
    assert c.passed is passed and says in c.message, c.message
