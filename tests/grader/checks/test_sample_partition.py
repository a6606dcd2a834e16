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


@pytest.mark.parametrize("reads, s_of_prefix, skipped", [
    (list(range(4, 8)) + list(range(8, 16)), 0, 4),   # the epoch's first 4 re-read and discarded, then on
    (list(range(8, 16)), 0, 0),                        # no fast-forward: judged by the rest of the check
    (list(range(4, 8)) + list(range(8, 16)), 1, 0),    # the re-reads came after a step: they were trained on
    (list(range(0, 8)) + list(range(8, 15)), 0, 0),    # a sample short of the uninterrupted run's
])
def test_a_restart_that_reads_and_discards_up_to_its_resume_point(reads, s_of_prefix, skipped):
    from types import SimpleNamespace

    from grader.checks.sample_partition import _read_to_skip

    full = list(range(16))
    n = len(reads) - 8
    ledger = [{"ds": "d", "a": 1, "i": i, "s": s_of_prefix if j < n else 0} for j, i in enumerate(reads)]
    assert _read_to_skip(SimpleNamespace(ledgers={0: ledger}), 0, "d", full, 8) == skipped
