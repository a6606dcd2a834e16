"""Each check on hand-built run dirs: the verdict, and evidence that names what was observed."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from grader.checks import Context, run_check
from grader.evidence import load_run
from grader.manifest import (Completes, MatchesReference, MemoryFlat, SamplePartition, Workload,
                             WorkloadIntact)
from grader.scoring import score
from grader.throughput import measure
from tests.grader.builders import make_run

N, W = 64, 2


class _M:  # the bits of a manifest checks read
    def __init__(self, **kw):
        self.world_size = kw.get("world_size", W)
        self.workload = Workload(dataset_size=N, global_batch=8, steps=kw.get("steps", 16), params=3)
        self.run = type("R", (), {"timeout": 60.0})()


def epochs(orders: list[list[int]]) -> dict[int, list[int]]:
    """Ledgers of a correct DistributedSampler: rank r takes order[r::W] of each epoch."""
    return {r: [i for o in orders for i in o[r::W]] for r in range(W)}


def perm(seed: int) -> list[int]:
    xs = list(range(N))
    random.Random(seed).shuffle(xs)
    return xs


def ctx_for(tmp_path: Path, **runs) -> Context:
    return Context(_M(), {role: load_run(role, make_run(tmp_path / role, **kw)) for role, kw in runs.items()})


@pytest.mark.parametrize("ledgers, passed, says", [
    (epochs([perm(0), perm(1)]), True, "2 epochs"),
    (epochs([perm(0), perm(0)]), False, "rank 0 consumed epochs 0 and 1 in the same order"),
    ({0: perm(0) + perm(1), 1: perm(0) + perm(1)}, False, "consumed more than once"),  # no sampler
    ({0: list(range(0, 32)) * 2, 1: list(range(0, 32))[::-1] * 2}, False, "never consumed"),
    ({0: [1, 2], 1: [3, 4]}, False, "less than one epoch's share"),
])
def test_sample_partition(tmp_path, ledgers, passed, says):
    c = run_check(SamplePartition(name="sample_partition"), ctx_for(tmp_path, main={"ledgers": ledgers}))
    assert c.passed is passed and says in c.message


@pytest.mark.parametrize("rss, passed, says", [
    ([100.0 + (i % 3) * 0.1 for i in range(60)], True, "threshold"),
    ([100.0 + i * 1.0 for i in range(60)], False, "+1.000 MB per step"),
    ([100.0] * 15, False, "at least"),
])
def test_memory_flat(tmp_path, rss, passed, says):
    c = run_check(MemoryFlat(name="memory_flat", warmup_steps=5, max_slope_mb_per_step=0.05),
                  ctx_for(tmp_path, main={"rss": rss, "steps": len(rss)}))
    assert c.passed is passed and says in c.message


def _params(v: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((3,), v)}


@pytest.mark.parametrize("mine, theirs, rank1, passed, says", [
    (1.0, 1.0, 1.0, True, "identical"),
    (1.0, 1.0 + 1e-7, 1.0, True, "match"),
    (1.0, 1.5, 1.0, False, "differ from the reference"),
    (1.0, 1.0, 2.0, False, "rank 1's final parameters differ from rank 0's"),
])
def test_matches_reference(tmp_path, mine, theirs, rank1, passed, says):
    ctx = ctx_for(tmp_path, main={"params": {0: _params(mine), 1: _params(rank1)}},
                  reference={"params": {0: _params(theirs), 1: _params(theirs)}})
    c = run_check(MatchesReference(name="matches_reference"), ctx)
    assert c.passed is passed and says in c.message


def test_tampered_final_params_do_not_count(tmp_path):
    ctx = ctx_for(tmp_path, main={"params": {0: _params(1.0), 1: _params(1.0)}},
                  reference={"params": {0: _params(2.0), 1: _params(2.0)}})
    for r in (0, 1):  # overwrite with the reference's values after the run: the signed hash differs
        torch.save(_params(2.0), tmp_path / "main" / "ranks" / str(r) / "final_params.pt")
    ctx = Context(ctx.manifest, {k: load_run(k, tmp_path / k) for k in ("main", "reference")})
    c = run_check(MatchesReference(name="matches_reference"), ctx)
    assert not c.passed and "left no final parameters" in c.message


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
    c = run_check(WorkloadIntact(name="workload_intact"), ctx)
    assert c.passed is passed and says in c.message, c.message


def test_workload_intact_fails_on_forged_records(tmp_path):
    ctx = ctx_for(tmp_path, main={"steps": 16, "ledgers": epochs([perm(0), perm(1)]),
                                  "params": {r: {"w": torch.zeros(3)} for r in range(W)}})
    with open(tmp_path / "main" / "ranks" / "0" / "samples.jsonl", "a") as f:
        f.write('{"a": 0, "ds": "train", "i": 5, "s": 0, "mac": "00000000000000000000000000000000"}\n')
        f.write('{"a": 0, "ds": "train", "i": 6, "s": 0}\n')
    ctx = Context(ctx.manifest, {"main": load_run("main", tmp_path / "main")})
    c = run_check(WorkloadIntact(name="workload_intact"), ctx)
    assert not c.passed and "2 record lines in the main run dir were not written by the harness" in c.message


@pytest.mark.parametrize("status, says", [("ok", "exited 0"), ("failed", "failed"), ("timeout", "limit")])
def test_completes(tmp_path, status, says):
    c = run_check(Completes(name="completes"), ctx_for(tmp_path, main={"status": status}))
    assert c.passed is (status == "ok") and says in c.message


def test_a_missing_run_is_an_environment_failure_not_a_verdict(tmp_path):
    c = run_check(MatchesReference(name="matches_reference"), ctx_for(tmp_path, main={}))
    assert not c.passed and c.environment


class _C:
    def __init__(self, name, passed, required=True, weight=1.0, environment=False):
        self.name, self.passed, self.required, self.weight, self.environment = name, passed, required, weight, environment


@pytest.mark.parametrize("checks, passed, value", [
    ([_C("a", True), _C("b", True)], True, 1.0),
    ([_C("a", True), _C("b", False)], False, 0.0),
    ([_C("a", True), _C("b", False, required=False)], True, 0.5),
    ([_C("a", True, weight=3), _C("b", False, required=False)], True, 0.75),
])
def test_score(checks, passed, value):
    s = score(checks)
    assert s.passed is passed and s.score == pytest.approx(value)


def test_throughput_is_the_median_of_interleaved_round_ratios():
    order, rates = [], {"broken": [10, 10, 10, 10], "candidate": [99, 20, 30, 25], "reference": [30, 30, 30, 30]}

    class _Ev:
        def __init__(self, r):
            self.ranks = {0: type("O", (), {"steps_per_s": r})(), 1: type("O", (), {"steps_per_s": r + 1})()}

    def run(role, tag):
        order.append(role)
        return _Ev(rates[role][len([o for o in order if o == role]) - 1])

    tp = measure(run, rounds=3, warmup_rounds=1, suspicious_factor=2.0, pass_speedup=2.0)
    assert order == ["broken", "candidate", "reference"] * 4  # interleaved, warm-up first
    assert tp.speedup == pytest.approx(2.5) and tp.reference_speedup == pytest.approx(3.0)
    assert tp.normalized == pytest.approx(0.75) and tp.passed and not tp.suspicious
    assert tp.spread == pytest.approx((3.0 - 2.0) / 2.5)


# -- checkpoint_valid: who wrote the file, from the save trace ------------------------------------

@pytest.mark.parametrize("writers, single_writer, passed, says", [
    ([0], True, True, "loads and holds the final parameters"),
    ([0, 1], True, False, "ranks 0 and 1 all wrote out/ckpt.pt"),  # every rank saving one path: a race
    ([0, 1], False, True, "loads and holds the final parameters"),   # an exercise may allow it
])
def test_checkpoint_valid_names_every_rank_that_wrote_the_file(tmp_path, writers, single_writer, passed, says):
    from grader.manifest import CheckpointValid
    from harness import rundir
    from tests.grader.builders import KEY

    final = {"w": torch.ones(3)}
    root = make_run(tmp_path / "main", params={0: final, 1: final})
    ckpt = root / "work" / "out" / "ckpt.pt"
    ckpt.parent.mkdir(parents=True)
    torch.save({"model": final}, ckpt)
    for r in writers:
        w = rundir.RecordWriter(rundir.rank_dir(root, r) / rundir.SAVES, KEY)
        w.write({"a": 0, "seq": 1, "ph": "begin", "op": "save", "path": str(ckpt.resolve()), "step": 16,
                 "main": True, "t": 20.0 + r})
        w.write({"a": 0, "seq": 1, "ph": "end", "op": "save", "dur": 0.1, "bytes": 100, "step": 16,
                 "main": True, "t": 20.1 + r})
        w.close()
    spec = CheckpointValid(name="checkpoint_valid", path="out/ckpt.pt", key="model", single_writer=single_writer)
    c = run_check(spec, Context(_M(), {"main": load_run("main", root)}))
    assert c.passed is passed and says in c.message, c.message
    assert c.evidence["writers"] == writers
