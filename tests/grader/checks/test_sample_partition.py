"""sample_partition on hand-built ledgers: partitions, orders, duplicates, gaps."""

from __future__ import annotations

import pytest

from grader.checks import run_check
from tests.grader.fakes import ctx_for, epochs, perm, spec


@pytest.mark.parametrize("ledgers, passed, says", [
    (epochs([perm(0), perm(1)]), True, "2 epochs"),
    (epochs([perm(0), perm(0)]), False, "rank 0 consumed epochs 0 and 1 in the same order"),
    ({0: perm(0) + perm(1), 1: perm(0) + perm(1)}, False, "consumed more than once"),  # no sampler
    ({0: list(range(0, 32)) * 2, 1: list(range(0, 32))[::-1] * 2}, False, "never consumed"),
    ({0: [1, 2], 1: [3, 4]}, False, "less than one epoch's share"),
])
def test_sample_partition(tmp_path, ledgers, passed, says):
    c = run_check(spec("sample_partition"), ctx_for(tmp_path, main={"ledgers": ledgers}))
    assert c.passed is passed and says in c.message
