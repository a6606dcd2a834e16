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
