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
