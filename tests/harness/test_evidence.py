"""Issue 12's evidence, recorded by the real instrumentation in a fresh interpreter (it patches
torch globally): fingerprints when each step begins and at exit, the work behind each step, the
memory counts, and the injected overflow a GradScaler skips."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from harness import rundir
from tests.conftest import REPO

pytestmark = pytest.mark.slow  # starts processes of its own (seconds each)

KEY = "k" * 32

SCRIPT = textwrap.dedent('''
    import os, sys, torch, torch.nn.functional as F
    from pathlib import Path
    os.environ["TRAINWRECK_FINGERPRINT"] = "1"
    if {graded}:
        os.environ["TRAINWRECK_GRADING_EVIDENCE"] = "1"
    orig_call = torch.nn.Module.__call__
    from harness import instrument
    rec = instrument.install(Path(sys.argv[1]), 0, {key!r}, 0, None)
    from harness import memstats
    memstats.MAX_EVERY = 1  # count every step: spaced by time under load, 12 steps left 2 counts (a flaky test)
    from harness.workloads import MLP
    model = MLP(8, 16, 1, 3)
    crit = torch.nn.MSELoss()  # a loss module: no parameters, not a forward pass of the model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)  # no overflow of its own
    torch.manual_seed(0)
    kept = []
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    for step in range(1, 13):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = crit(model(x), y)
        scaler.scale(loss).backward()
        if step <= 3:  # two more passes in the first steps: work the step hook never saw
            F.mse_loss(model(x), y).backward()
            torch.autograd.grad(F.mse_loss(model(x), y), list(model.parameters()))
        scaler.step(opt)
        scaler.update()
        if {leak}:
            kept.append(F.mse_loss(model(torch.randn(16, 8)), torch.randn(16, 1)))  # a graph kept per step
        if step == 6 and {nudge}:
            with torch.no_grad():
                model.net[0].weight[0, 0] += 1.0  # set by hand between steps 6 and 7
    model(x)  # after the last step: the tail
    print("module call wrapped:", torch.nn.Module.__call__ is not orig_call)
    saved = rec.save_final_params()
    rec.event("exit", status="ok", code=0, steps=rec.step, error=None, **saved)
''')


def _run(tmp_path, leak=False, nudge=False, overflow=None, graded=True, out=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINWRECK_")}
    env["PYTHONPATH"] = str(REPO)
    env["OMP_NUM_THREADS"] = "1"
    if overflow:
        env["TRAINWRECK_OVERFLOW_AT"] = str(overflow)
    run_dir = tmp_path / "run"
    rundir.rank_dir(run_dir, 0).mkdir(parents=True)
    p = subprocess.run([sys.executable, "-c", SCRIPT.format(key=KEY, leak=leak, nudge=nudge, graded=graded),
                        str(run_dir)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    if out is not None:
        out.append(p.stdout)
    return rundir.read_records(rundir.rank_dir(run_dir, 0) / rundir.EVENTS, KEY).valid


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("plain"))


def _steps(recs):
    return [r for r in recs if r["kind"] == "step"]


def test_each_step_begins_where_the_last_ended_and_the_exit_holds_the_last(plain):
    steps = _steps(plain)
    assert [r["step"] for r in steps] == list(range(1, 13))
    assert not any(r.get("skipped") for r in steps)
    for a, b in zip(steps, steps[1:]):
        assert b["fp_pre"] == a["fp"]
    fp0 = next(r for r in plain if r["kind"] == "fingerprint0")
    assert steps[0]["fp_pre"] == fp0["fp"]
    end = next(r for r in plain if r["kind"] == "exit")
    assert end["fp_exit"] == [steps[-1]["fp"]]


def test_the_work_behind_each_step_is_counted(plain):
    steps = _steps(plain)
    assert [r["backward_passes"] for r in steps] == [3, 3, 3] + [1] * 9
    assert [r["forward_calls"] for r in steps] == [3, 3, 3] + [1] * 9   # the loss module is not a forward
    assert [r["forward_rows"] for r in steps] == [12, 12, 12] + [4] * 9
    # the samples each step trained on: the three passes of steps 1-3 each reached a forward of 4 rows
    assert [r["backward_rows"] for r in steps] == [12, 12, 12] + [4] * 9
    assert {r["backward_max_rows"] for r in steps} == {4} and {r["backward_blind"] for r in steps} == {0}
    assert steps[0]["autocast"] == {"float16": 1, "off": 2} and steps[5]["autocast"] == {"float16": 1}
    assert steps[0]["compute"] == {"float16": 1, "float32": 2} and steps[5]["compute"] == {"float16": 1}
    end = next(r for r in plain if r["kind"] == "exit")
    assert (end["tail_forward_calls"], end["tail_forward_rows"], end["tail_backward_passes"]) == (1, 4, 0)
    assert end["tail_autocast"] == {"off": 1}


@pytest.fixture(scope="module")
def bent(tmp_path_factory):
    """A graph kept every step, a weight set by hand between steps 6 and 7, an overflow at step 9."""
    return _run(tmp_path_factory.mktemp("bent"), leak=True, nudge=True, overflow=9)


def test_memory_counts_are_flat_when_nothing_is_kept_and_grow_when_graphs_are(plain, bent):
    counted = [r for r in _steps(plain) if "live_tensors" in r]
    assert [r["step"] for r in counted] == list(range(2, 13)) and all(r["mem_ms"] >= 0 for r in counted)
    assert len({(r["live_tensors"], r["graph_nodes"], r["live_bytes"]) for r in counted[2:]}) == 1, counted
    leaking = [r for r in _steps(bent) if "live_tensors" in r]
    assert leaking[-1]["live_tensors"] > leaking[0]["live_tensors"] + 5
    assert leaking[-1]["graph_nodes"] > leaking[0]["graph_nodes"] + 20


def test_a_change_between_steps_shows_in_fp_pre(bent):
    steps = _steps(bent)
    assert steps[6]["fp_pre"] != steps[5]["fp"]
    assert all(b.get("fp_pre", b["fp"]) == a["fp"] for a, b in zip(steps, steps[1:]) if b["step"] != 7)


def test_the_injected_overflow_is_skipped_by_a_grad_scaler(bent):
    steps = _steps(bent)
    inj = [r for r in bent if r["kind"] == "overflow"]
    assert inj == [{**inj[0], "step": 9, "param": "net.0.weight"}]
    assert steps[8].get("skipped") and steps[8]["fp"] == steps[7]["fp"] and "fp_pre" not in steps[8]
    assert steps[9]["loss_scale"] == steps[7]["loss_scale"] / 2
    assert all(json.dumps(r["fp"]) != "NaN" for r in steps)


WORK_FIELDS = {"backward_passes", "forward_calls", "forward_rows", "autocast", "backward_rows",
               "backward_max_rows", "backward_blind"}
MEMORY_FIELDS = {"live_tensors", "graph_nodes", "live_bytes", "mem_ms"}


@pytest.mark.parametrize("graded", [True, False])
def test_work_and_memory_counts_are_recorded_in_gradings_only(tmp_path, graded):
    """A plain `trainwreck run` pays for neither: nn.Module.__call__ stays torch's own, and no step
    record carries the counts; a grading run (rundir.GRADING_EVIDENCE_ENV) has both."""
    out: list[str] = []
    recs = _run(tmp_path, graded=graded, out=out)
    fields = set().union(*(r.keys() for r in _steps(recs)))
    assert (WORK_FIELDS <= fields, MEMORY_FIELDS <= fields) == (graded, graded)
    assert not graded or all(WORK_FIELDS - {"autocast"} <= r.keys() for r in _steps(recs))
    assert f"module call wrapped: {graded}" in out[0]
    assert [r["step"] for r in _steps(recs)] == list(range(1, 13))  # the step records themselves are the same
    assert all("loss" in r and "rss_mb" in r for r in _steps(recs))


SAMPLES_SCRIPT = textwrap.dedent('''
    import os, sys, torch, torch.nn.functional as F
    from pathlib import Path
    os.environ["TRAINWRECK_GRADING_EVIDENCE"] = "1"
    from harness import instrument
    rec = instrument.install(Path(sys.argv[1]), 0, {key!r}, 0, None)
    from harness.workloads import MLP
    model = MLP(8, 16, 1, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    # step 1: gradient accumulation, two micro-batches of 16 (the loss halved)
    for xm, ym in zip(x.chunk(2), y.chunk(2)):
        (F.mse_loss(model(xm), ym) / 2).backward()
    opt.step(); opt.zero_grad()
    # step 2: an evaluation under autograd (never backpropagated), then the batch whole
    model(torch.randn(100, 8)).mean().item()
    F.mse_loss(model(x), y).backward()
    opt.step(); opt.zero_grad()
    # step 3: the batch, plus a penalty computed without calling a module: a pass that reaches no forward
    F.mse_loss(model(x), y).backward()
    (sum(p.pow(2).sum() for p in model.parameters()) * 1e-4).backward()
    opt.step(); opt.zero_grad()
    # step 4: the batch trained on three times over, in hidden passes
    for _ in range(3):
        F.mse_loss(model(x), y).backward()
    opt.step()
    rec.event("exit", status="ok", code=0, steps=rec.step, error=None)
''')


def test_the_samples_each_step_trained_on_are_counted(tmp_path):
    """What workload_intact judges instead of calls: accumulation counts its micro-batches' samples
    once each, an evaluation's forward pass (autograd on or not) is not training, and a backward pass
    that reached no module's output is counted as blind."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINWRECK_")}
    env["PYTHONPATH"] = str(REPO)
    env["OMP_NUM_THREADS"] = "1"
    run_dir = tmp_path / "run"
    rundir.rank_dir(run_dir, 0).mkdir(parents=True)
    p = subprocess.run([sys.executable, "-c", SAMPLES_SCRIPT.format(key=KEY), str(run_dir)], capture_output=True,
                       text=True, env=env, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    steps = _steps(rundir.read_records(rundir.rank_dir(run_dir, 0) / rundir.EVENTS, KEY).valid)
    got = [(r["backward_passes"], r["forward_rows"], r["backward_rows"], r["backward_max_rows"], r["backward_blind"])
           for r in steps]
    assert got == [(2, 32, 32, 16, 0), (1, 132, 32, 32, 0), (2, 32, 32, 32, 1), (3, 96, 96, 32, 0)], got
