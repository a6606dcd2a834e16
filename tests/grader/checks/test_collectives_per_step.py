"""collectives_per_step on a hand-built collective trace."""

from __future__ import annotations

import pytest

from grader.checks import Context, run_check
from grader.evidence import load_run
from harness import rundir
from tests.grader.fakes import FakeManifest, spec
from tests.grader.rundirs import RunDirBuilder


def _run(root, per_step: int, steps: int = 10):
    b = RunDirBuilder(root)
    for r in range(2):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        seq = 0
        b.add(r, rundir.COLLECTIVES, a=0, seq=0, op="broadcast", ph="enter", site="t.py:1", shapes=[], dtype=None,
              step=0, t=0.0)  # set-up before the first step does not count
        for s in range(1, steps + 1):
            for _ in range(per_step):  # during step s: s - 1 steps done
                seq += 1
                b.add(r, rundir.COLLECTIVES, a=0, seq=seq, op="all_reduce", ph="enter", site="t.py:9", shapes=[[4]],
                      dtype="float32", step=s - 1, t=float(s))
                b.add(r, rundir.COLLECTIVES, a=0, seq=seq, ph="exit", t=float(s))
            b.event(r, kind="step", attempt=0, t=float(s), step=s, dt=0.01, rss_mb=1.0, lr=[0.1])
        b.exit(r, t=11.0, steps=steps)
    return load_run("main", b.build())


@pytest.mark.parametrize("per_step, passed, says", [
    (1, True, "all_reduce x"),
    (2, True, "at most 2 allowed"),
    (6, False, "Python-level collectives per optimizer step"),
])
def test_collectives_per_step(tmp_path, per_step, passed, says):
    c = run_check(spec("collectives_per_step", max_per_step=2), Context(FakeManifest(), {"main": _run(tmp_path, per_step)}))
    assert c.passed is passed and says in c.message, c.message
