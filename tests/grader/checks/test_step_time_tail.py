"""step_time_tail on hand-built signed run dirs: a periodic stall and its evidence, and a stall
hidden by slowing every step."""

from __future__ import annotations

import pytest

from grader.checks.step_time_tail import Spec as StepTimeTail
from tests.grader.checks.stall_runs import judge


def stalled(n: int = 200, every_k: int = 20, base: float = 0.03, stall: float = 0.9) -> list[float]:
    return [base + (stall if s % every_k == 1 and s > 1 else 0.0) for s in range(1, n + 1)]


def tail(**kw) -> StepTimeTail:
    return StepTimeTail(**{"name": "step_time_tail", "max_p99_over_median": 3.0, **kw})


@pytest.mark.parametrize("dts, spec, passed, says", [
    ([0.03] * 200, tail(), True, "at most 1.00x the median"),
    ([0.03 + 0.01 * (s % 3) for s in range(200)], tail(), True, "bound 3x"),
    (stalled(), tail(), False, "steps 21, 41, 61 and 6 more took 0.93 s against a median of 0.030 s"),
    (stalled(every_k=150), tail(), True, "at most"),    # one stall in 200 steps is below the p99
    ([0.03] * 50, tail(), False, "a p99 needs at least 100"),
    ([5.0] + [0.03] * 199, tail(), True, "at most"),     # the first step pays for start-up
    ([5.0] + [0.03] * 199, tail(warmup_steps=0), True, "at most"),
])
def test_step_time_tail(tmp_path, dts, spec, passed, says):
    c = judge(tmp_path, spec, dts=dts)
    assert c.passed is passed and says in c.message, c.message
    if not passed and "steps" in says:
        assert c.evidence["ranks"][0]["slow_steps"][:3] == [21, 41, 61]
        assert c.evidence["ranks"][0]["p99_over_median"] > 25


@pytest.mark.parametrize("mine, reference, passed, says", [
    ([0.03] * 200, [0.03] * 200, True, "at most"),
    ([0.93] * 200, [0.03] * 200, False, "31.0x the reference run's"),   # every step padded to hide the stall
    ([0.93] * 200, None, False, "no reference run"),
])
def test_slowing_every_step_does_not_hide_a_stall(tmp_path, mine, reference, passed, says):
    c = judge(tmp_path, tail(max_median_over_reference=5.0),
              reference={"dts": reference} if reference else None, dts=mine)
    assert c.passed is passed and says in c.message, c.message
