"""The per-phase step timer and the reader of its records, without launching anything."""

from __future__ import annotations

import json
import threading

import pytest

from harness import rundir
from harness.phases import PHASES, PROFILE, PhaseTimer, read_rank, read_run, summarize

KEY = "k" * 32


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def run_ops(ops):
    """Drive a timer with ("enter"|"exit", phase) and ("tick", seconds) operations; close once."""
    clock = FakeClock()
    timer = PhaseTimer(clock=clock)
    for op, arg in ops:
        if op == "tick":
            clock.t += arg
        else:
            getattr(timer, op)(arg)
    return timer.close_window()


@pytest.mark.parametrize("ops, want", [
    # nested phases are exclusive: the collective inside backward is sync only
    ([("enter", "backward"), ("tick", 2), ("enter", "sync"), ("tick", 3), ("exit", "sync"), ("tick", 1),
      ("exit", "backward"), ("tick", 4)],
     {"backward": 3, "sync": 3, "other": 4, "wall": 10}),
    # the same phase nested (submodules, Tensor.backward -> autograd.backward) counts once
    ([("enter", "forward"), ("enter", "forward"), ("tick", 2), ("exit", "forward"), ("tick", 1),
      ("exit", "forward"), ("tick", 1)],
     {"forward": 3, "other": 1, "wall": 4}),
    # an exception skipped sync's exit: leaving backward closes both, nothing is charged twice
    ([("enter", "backward"), ("tick", 1), ("enter", "sync"), ("tick", 2), ("exit", "backward"), ("tick", 5)],
     {"backward": 1, "sync": 2, "other": 5, "wall": 8}),
    # an exit that matches nothing (a GradScaler-skipped step has no optimizer pre-hook) is ignored
    ([("tick", 1), ("exit", "optimizer"), ("enter", "data"), ("tick", 2), ("exit", "data")],
     {"data": 2, "other": 1, "wall": 3}),
    # a phase still open at the boundary is charged up to it
    ([("enter", "checkpoint"), ("tick", 6)], {"checkpoint": 6, "wall": 6}),
])
def test_timer_charges_each_second_once(ops, want):
    got = run_ops(ops)
    for p in PHASES:
        assert got[p] == pytest.approx(want.get(p, 0.0)), p
    assert got["wall"] == pytest.approx(want["wall"])
    assert sum(got[p] for p in PHASES) == pytest.approx(got["wall"])


def test_timer_ignores_other_threads_and_opens_a_new_window():
    clock = FakeClock()
    timer = PhaseTimer(clock=clock)
    timer.enter("forward")
    clock.t = 1.0

    def background():  # a save on another thread must not stop or restart the main thread's phase
        timer.enter("checkpoint")
        timer.exit("forward")

    t = threading.Thread(target=background)
    t.start()
    t.join()
    clock.t = 3.0
    first = timer.close_window(profiler_s=0.5)
    assert first["forward"] == 3.0 and first["checkpoint"] == 0.0 and first["profiler"] == 0.5
    clock.t = 4.0
    timer.exit("forward")
    second = timer.close_window()
    assert second["forward"] == 1.0 and second["wall"] == 1.0  # carried on into the next window


def step(n, wall, traced=False, attempt=0, **phases):
    rec = {"kind": "phases", "attempt": attempt, "t": float(n), "step": n, "traced": traced,
           "wall": wall, "profiler": 0.0, "bg_checkpoint": 0.0}
    rec.update({p: 0.0 for p in PHASES})
    rec.update(phases)
    return rec


def test_summary_leaves_out_start_up_and_traced_steps():
    recs = [step(1, 9.0, data=9.0), step(2, 9.0, forward=9.0),  # start-up
            step(3, 0.10, data=0.06, forward=0.01, backward=0.02, other=0.01),
            step(4, 0.10, data=0.08, forward=0.01, other=0.01),
            step(5, 5.0, traced=True, sync=5.0),  # the torch profiler was recording
            step(6, 0.20, data=0.10, forward=0.01, checkpoint=0.08, other=0.01)]
    p = summarize(0, recs)
    assert (p.steps, p.counted) == (6, 3)
    assert p.step_ms == pytest.approx(100.0)
    assert p.phases["data"].median_ms == pytest.approx(80.0)
    assert p.phases["data"].share == pytest.approx(0.24 / 0.40)
    # a checkpoint every few steps: median 0, yet its share shows it
    assert p.phases["checkpoint"].median_ms == 0.0 and p.phases["checkpoint"].share == pytest.approx(0.2)
    assert p.phases["sync"].share == 0.0
    assert sum(s.share for s in p.phases.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("recs, counted, how", [
    ([], 0, "no optimizer step"),
    ([step(1, 1.0), step(2, 1.0, traced=True)], 1, "all untraced steps"),
    ([step(1, 1.0, traced=True)], 1, "traced ones included"),
    # only the last attempt counts: a restarted job is judged on the run that finished
    ([step(n, 1.0) for n in range(1, 9)] + [step(n, 2.0, attempt=1) for n in range(1, 5)], 2, "after the first 2"),
])
def test_summary_of_short_and_restarted_runs(recs, counted, how):
    p = summarize(0, recs)
    assert p.counted == counted and how in p.counted_from
    if counted:
        assert p.phases.keys() == set(PHASES)


def write_profile(run_dir, rank, records, extra_lines=()):
    d = rundir.rank_dir(run_dir, rank)
    w = rundir.RecordWriter(d / PROFILE, KEY)
    for r in records:
        w.write(r)
    w.close()
    with open(d / PROFILE, "a") as f:
        for line in extra_lines:
            f.write(line + "\n")
    return d


def test_reader_counts_only_signed_records_and_intact_traces(tmp_path):
    d = rundir.rank_dir(tmp_path, 0)
    d.mkdir(parents=True)
    (d / "trace.a0.pt.trace.json").write_text(json.dumps({"traceEvents": []}))
    sha = rundir.sha256_file(d / "trace.a0.pt.trace.json")
    steps = [step(n, 0.1, data=0.09, other=0.01) for n in range(1, 7)]
    forged = json.dumps({**step(7, 0.1, sync=0.1), "mac": "0" * 32})
    write_profile(tmp_path, 0, [{"kind": "profile_start", "attempt": 0, "t": 0.0, "cuda_sync": False},
                                *steps,
                                {"kind": "trace", "attempt": 0, "t": 1.0, "file": "trace.a0.pt.trace.json",
                                 "sha256": sha, "steps": [6, 8]}],
                  extra_lines=[forged])
    p = read_rank(tmp_path, 0, KEY)
    assert p.forged_lines == 1 and p.steps == 6 and p.phases["sync"].share == 0.0
    assert p.trace == str(d / "trace.a0.pt.trace.json") and p.trace_steps == [6, 8]

    (d / "trace.a0.pt.trace.json").write_text("{}")  # replaced after the rank wrote it
    p = read_rank(tmp_path, 0, KEY)
    assert p.trace is None and "differs" in p.trace_error


def test_reader_of_a_run(tmp_path):
    write_profile(tmp_path, 1, [step(n, 0.1, forward=0.1) for n in range(1, 5)])
    rundir.rank_dir(tmp_path, 0).mkdir(parents=True)  # rank 0 never started the profiler
    rundir.atomic_write_json(tmp_path / "run.json", {"key": KEY})
    out = read_run(tmp_path)
    assert [r["rank"] for r in out["ranks"]] == [1]
    assert out["ranks"][0]["phases"]["forward"]["share"] == pytest.approx(1.0)
    assert out["phases"] == list(PHASES) and any("DDP" in n for n in out["notes"])
    assert read_rank(tmp_path, 0, KEY) is None
