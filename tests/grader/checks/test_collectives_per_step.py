"""collectives_per_step on a hand-built collective trace: the count per step, and the gradient bytes
a data-parallel step must reduce."""

from __future__ import annotations

import pytest

from grader.checks import Context, run_check
from grader.evidence import load_run
from harness import rundir
from tests.grader.fakes import FakeManifest, spec
from tests.grader.rundirs import KEY, RunDirBuilder


def _run(root, per_step: int, steps: int = 10, nbytes=12, op="all_reduce", world_size=2):
    b = RunDirBuilder(root, world_size=world_size)
    for r in range(world_size):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        seq = 0
        b.add(r, rundir.COLLECTIVES, a=0, seq=0, op="broadcast", ph="enter", site="t.py:1", shapes=[], dtype=None,
              step=0, t=0.0)  # set-up before the first step does not count
        for s in range(1, steps + 1):
            for _ in range(per_step):  # during step s: s - 1 steps done
                seq += 1
                b.add(r, rundir.COLLECTIVES, a=0, seq=seq, op=op, ph="enter", site="t.py:9", shapes=[[4]],
                      dtype="float32", step=s - 1, t=float(s), **({} if nbytes is None else {"bytes": nbytes}))
                b.add(r, rundir.COLLECTIVES, a=0, seq=seq, ph="exit", t=float(s))
            b.event(r, kind="step", attempt=0, t=float(s), step=s, dt=0.01, rss_mb=1.0, lr=[0.1])
        b.exit(r, t=11.0, steps=steps)
    return load_run("main", b.build())


def test_a_one_off_exchange_does_not_move_the_count(tmp_path):
    _run(tmp_path, 2)
    for r in range(2):  # DDP rebuilding its buckets in the second step: two broadcasts, once
        w = rundir.RecordWriter(rundir.rank_dir(tmp_path, r) / rundir.COLLECTIVES, KEY)
        for seq in (900, 901):
            w.write({"a": 0, "seq": seq, "op": "broadcast", "ph": "enter", "site": "t.py:9", "shapes": [], "dtype": None,
                     "step": 1, "t": 2.0})
        w.close()
    c = run_check(spec("collectives_per_step", max_per_step=2), Context(FakeManifest(), {"main": load_run("main", tmp_path)}))
    assert c.passed and c.evidence["most_in_a_step"] == {0: 4, 1: 4}, c.message


@pytest.mark.parametrize("per_step, passed, says", [
    (1, True, "all_reduce x"),
    (2, True, "at most 2 allowed"),
    (6, False, "6 collectives per optimizer step (median over the steps after the first; most common: all_reduce x"),
])
def test_collectives_per_step(tmp_path, per_step, passed, says):
    c = run_check(spec("collectives_per_step", max_per_step=2), Context(FakeManifest(), {"main": _run(tmp_path, per_step)}))
    assert c.passed is passed and says in c.message, c.message


# FakeManifest's model has 3 parameters: 12 bytes of fp32 gradients
@pytest.mark.parametrize("kw, passed, says", [
    ({"per_step": 1, "nbytes": 12}, True, "12 B of gradients reduced per step (median), the model's are 12 B"),
    ({"per_step": 2, "nbytes": 3}, True, "6 B of gradients reduced per step"),  # fp16 compression: half, in two buckets
    ({"per_step": 1, "nbytes": 12, "op": "reduce_scatter_single"}, True, "12 B of gradients"),  # FSDP's
    # every rank computes the whole global batch itself: no gradient communication at all
    ({"per_step": 0}, False, "rank 0 reduced 0 B of gradients during optimizer step 1, and less than 50% of the "
                             "model's gradients (12 B: 3 fp32 parameters) in 10 of its 10 steps (median 0 B per step)"),
    ({"per_step": 1, "nbytes": 12, "op": "broadcast"}, False, "in 10 of its 10 steps"),  # parameters, not gradients
    ({"per_step": 1, "nbytes": 4}, False, "reduced 4 B of gradients during optimizer step 1"),  # one layer of three
    ({"per_step": 0, "world_size": 1}, True, "0 collectives per optimizer step"),  # nothing to communicate alone
    ({"per_step": 1, "nbytes": None}, True, "1 collectives per optimizer step"),  # a trace without bytes: not judged
])
def test_a_data_parallel_step_reduces_its_gradients(tmp_path, kw, passed, says):
    m = FakeManifest(world_size=kw.get("world_size", 2))
    c = run_check(spec("collectives_per_step", max_per_step=2, min_gradient_share=0.5), Context(m, {"main": _run(tmp_path, **kw)}))
    assert c.passed is passed and says in c.message, c.message
