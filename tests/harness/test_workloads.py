"""The kit's datasets write the sample ledger: one record per item, or per batch when torch's
DataLoader fetches a batch at once (``__getitems__``), and a subclass's own ``__getitem__`` still
runs for every item."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, Subset

from harness import workloads


@pytest.fixture
def ledger(monkeypatch):
    got: list[tuple[str, object]] = []
    monkeypatch.setattr(workloads, "_record", lambda ds, i: got.append((ds, i)))
    return got


class Doubled(workloads.SyntheticRegression):
    def __getitem__(self, index):
        x, y = super().__getitem__(index)
        return 2 * x, y


@pytest.mark.parametrize("make", [
    lambda: workloads.SyntheticRegression(10, 4, name="d"),
    lambda: workloads.SyntheticTokens(10, 6, 8, name="d"),
    lambda: workloads.SensorRecords(10, 16, name="d"),
])
def test_a_batch_fetch_is_one_record_and_the_same_items(ledger, make):
    ds = make()
    items = [ds[i] for i in (3, 1, 4)]
    assert ledger == [("d", 3), ("d", 1), ("d", 4)]
    ledger.clear()
    (batch,) = list(DataLoader(Subset(ds, [3, 1, 4]), batch_size=3, collate_fn=list))
    assert ledger == [("d", [3, 1, 4])]
    for a, b in zip(batch, items):
        assert all((torch.equal(p, q) if isinstance(p, torch.Tensor) else p == q) for p, q in zip(a, b))


def test_a_subclass_item_runs_per_item(ledger):
    ds = Doubled(6, 4, name="d")
    x, _ = next(iter(DataLoader(ds, batch_size=3)))
    assert ledger == [("d", 0), ("d", 1), ("d", 2)]  # per item, through the subclass
    assert torch.equal(x, 2 * workloads.SyntheticRegression(6, 4).x[:3])
