"""harness.batched: records buffered in memory, sent in order, in batches, by a daemon thread."""
from __future__ import annotations

import time

import pytest

from harness import batched
from harness.batched import Batched


class Batches:
    def __init__(self):
        self.batches: list[list[dict]] = []

    def write_many(self, records):
        self.batches.append(list(records))


@pytest.fixture
def slow_timer(monkeypatch):
    monkeypatch.setattr(batched, "FLUSH_S", 60.0)


@pytest.mark.parametrize("ops,batches", [
    ([("write", 1), ("write", 2), ("flush", None)], [[1, 2]]),
    ([("write", 1), ("write_now", 2), ("write", 3), ("flush", None)], [[1, 2], [3]]),
    ([("write_now", 1)], [[1]]),
    ([("flush", None), ("write", 1)], []),  # an empty buffer sends no batch; a write alone waits
])
def test_records_leave_in_order(slow_timer, ops, batches):
    w = Batches()
    b = Batched(w)
    for op, n in ops:
        getattr(b, op)(*([{"n": n}] if n is not None else []))
    assert [[r["n"] for r in batch] for batch in w.batches] == batches


def test_the_flusher_sends_within_the_interval(monkeypatch):
    monkeypatch.setattr(batched, "FLUSH_S", 0.02)
    w = Batches()
    b = Batched(w, thread_name="trainwreck-test")
    b.write({"n": 1})
    deadline = time.monotonic() + 5
    while not w.batches and time.monotonic() < deadline:
        time.sleep(0.01)
    assert w.batches == [[{"n": 1}]]
    assert b._flusher.name == "trainwreck-test" and b._flusher.daemon
