"""A batch ledger record reads as one entry per index; what is not a read is no entry; the grader's
memory is capped whatever a rank sends."""

from __future__ import annotations

import pytest

from grader.evidence import ledger_entries


def rec(i, **more):
    return {"a": 0, "ds": "train", "i": i, "s": 2, "rt": 1.5, **more}


@pytest.mark.parametrize("records, cap, want", [
    ([rec(3)], 10, [rec(3)]),
    ([rec([3, 1, 4])], 10, [rec(3), rec(1), rec(4)]),
    ([rec(0), rec([5, 6]), rec(7)], 10, [rec(0), rec(5), rec(6), rec(7)]),
    ([rec([])], 10, []),
    # not a read: a string, a float, a bool, a list holding anything but ints, no index at all
    ([rec("3"), rec(3.0), rec(True), rec([1, "2"]), rec([1, [2]]), {"a": 0, "ds": "train"}], 10, []),
    # the cap, inside a batch and across records
    ([rec([1, 2, 3, 4])], 3, [rec(1), rec(2), rec(3)]),
    ([rec(0), rec([1, 2]), rec(3), rec(4)], 3, [rec(0), rec(1), rec(2)]),
])
def test_ledger_entries(records, cap, want):
    assert ledger_entries(records, cap) == want
