"""memory_flat on hand-built RSS series."""

from __future__ import annotations

import pytest

from grader.checks import run_check
from tests.grader.fakes import ctx_for, spec


@pytest.mark.parametrize("rss, passed, says", [
    ([100.0 + (i % 3) * 0.1 for i in range(60)], True, "threshold"),
    ([100.0 + i * 1.0 for i in range(60)], False, "+1.000 MB per step"),
    ([100.0] * 15, False, "at least"),
])
def test_memory_flat(tmp_path, rss, passed, says):
    c = run_check(spec("memory_flat", warmup_steps=5, max_slope_mb_per_step=0.05),
                  ctx_for(tmp_path, main={"rss": rss, "steps": len(rss)}))
    assert c.passed is passed and says in c.message


@pytest.mark.parametrize("mine, theirs, passed, says", [
    (390.0, 389.0, True, "threshold"),
    (825.0, 389.0, False, "2.1x the reference run's level"),   # a balloon released as the leak grows
    (500.0, 389.0, True, "threshold"),                         # within 1.25x + 64 MB
])
def test_a_flat_but_high_level_fails_against_the_reference(tmp_path, mine, theirs, passed, says):
    ctx = ctx_for(tmp_path, main={"rss": [mine] * 60, "steps": 60}, reference={"rss": [theirs] * 60, "steps": 60})
    c = run_check(spec("memory_flat", warmup_steps=5, max_slope_mb_per_step=0.05, max_level_over_reference=1.25),
                  ctx)
    assert c.passed is passed and says in c.message, c.message


def test_growing_graph_counts_fail_whatever_rss_does(tmp_path):
    from grader.checks import Context
    from grader.evidence import load_run
    from tests.grader.fakes import FakeManifest
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(tmp_path / "main")
    for r in range(2):
        for s in range(1, 61):
            b.event(r, kind="step", attempt=0, t=float(s), step=s, dt=0.01, rss_mb=400.0, lr=[0.1],
                    live_tensors=40 + s, graph_nodes=12 * s)
        b.exit(r, t=70.0, steps=60)
    c = run_check(spec("memory_flat", warmup_steps=5), Context(FakeManifest(), {"main": load_run("main", b.build())}))
    assert not c.passed and "the live tensors rank 0 holds grew by 1.00 per step" in c.message, c.message


def _counted(root, every=3, tensors=lambda s: 40.0, nodes=lambda s: 60.0, rss=lambda s: 400.0, refrozen_at=None):
    """A 2-rank run of 60 steps whose records carry the counts every ``every`` steps (as the harness
    spaces them to stay within its time budget)."""
    from grader.evidence import load_run
    from tests.grader.rundirs import RunDirBuilder

    b = RunDirBuilder(root)
    for r in range(2):
        for s in range(1, 61):
            rec = {"kind": "step", "attempt": 0, "t": float(s), "step": s, "dt": 0.01, "rss_mb": rss(s), "lr": [0.1]}
            if s % every == 0:
                rec.update(live_tensors=tensors(s), graph_nodes=nodes(s), mem_ms=0.2)
                if refrozen_at is not None and s >= refrozen_at:
                    rec["gc_refrozen"] = 1
            b.event(r, **rec)
        b.exit(r, t=70.0, steps=60)
    return load_run(root.name, b.build())


def _judge_counts(tmp_path, main, reference=None, **fields):
    from grader.checks import Context
    from tests.grader.fakes import FakeManifest

    runs = {"main": main}
    if reference is not None:
        runs["reference"] = reference
        fields.setdefault("max_level_over_reference", 1.25)
    return run_check(spec("memory_flat", warmup_steps=5, **fields), Context(FakeManifest(), runs))


def test_counts_taken_every_few_steps_are_judged_per_step(tmp_path):
    # a kept graph: one tensor and 8 nodes per evaluation, every second step; RSS flat (a balloon)
    c = _judge_counts(tmp_path, _counted(tmp_path / "main", tensors=lambda s: 12 + s // 2, nodes=lambda s: 22 + 4 * s))
    assert not c.passed and "the live tensors rank 0 holds grew by 0.50 per step from step 6 to step 60 (15 → 42, " \
                               "counted at 19 steps after warm-up)" in c.message, c.message


def test_flat_counts_pass(tmp_path):
    c = _judge_counts(tmp_path, _counted(tmp_path / "main", tensors=lambda s: 12 + s % 2), _counted(tmp_path / "ref"))
    assert c.passed, c.message


def test_a_pile_of_tensors_released_as_a_leak_grows_fails_on_its_level(tmp_path):
    # 600 tensors held from the start and released one per step as the leak adds one: flat, but high
    main = _counted(tmp_path / "main", tensors=lambda s: 600.0, nodes=lambda s: 700.0)
    c = _judge_counts(tmp_path, main, _counted(tmp_path / "ref", tensors=lambda s: 12.0, nodes=lambda s: 22.0))
    assert not c.passed and "rank 0 held a median of 600 live tensors after warm-up, 50.0x the reference run's level " \
                            "(at most 1.25x plus 100)" in c.message, c.message


def test_objects_frozen_out_of_sight_fail(tmp_path):
    c = _judge_counts(tmp_path, _counted(tmp_path / "main", refrozen_at=30))
    assert not c.passed and "rank 0 moved objects out of the garbage collector's sight (gc.freeze) after the harness " \
                            "began counting its live tensors (seen at step 30)" in c.message, c.message
