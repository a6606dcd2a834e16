"""The live-tensor and graph-node counts (harness.memstats), in this process."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import pytest
import torch

from harness import memstats


@pytest.fixture(scope="module")
def _unfrozen_after():
    """The harness freezes this test process's objects; the collector sees them again once this
    module's tests are done. Not after each test: every test's first step freezes whatever is alive
    then, and the objects an earlier test froze stay frozen, so the next freeze collects and scans only
    what came since (unfrozen after each test, each freeze walked the whole pytest-xdist worker: about
    0.7 s a test, 11 s of the fast tier)."""
    yield
    gc.unfreeze()


@pytest.fixture
def stats(monkeypatch, _unfrozen_after):
    monkeypatch.setattr(gc, "freeze", gc.freeze)  # install() wraps it: put the original back after
    rec = SimpleNamespace(step=0, step_fields=[])
    return memstats.install(rec)


@pytest.mark.parametrize("script_freezes", [0, 1, 2])
def test_a_script_that_freezes_the_collector_itself_is_seen(stats, script_freezes):
    assert stats.on_step(1) == {}  # step 1: the harness freezes what exists
    for _ in range(script_freezes):
        gc.freeze()
    out = stats.on_step(2)
    assert out.get("gc_refrozen", 0) == script_freezes


def test_kept_graphs_grow_the_counts(stats):
    stats.on_step(1)
    first = stats.on_step(2)
    w = torch.ones(3, requires_grad=True)
    kept = [(w * i).sum() for i in range(10)]  # ten graphs held, as a leak would
    stats.next_step = 3
    later = stats.on_step(3)
    assert later["live_tensors"] >= first["live_tensors"] + 10
    assert later["graph_nodes"] >= first["graph_nodes"] + 10
    del kept


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


@pytest.mark.parametrize("make, tensors, nodes", [
    (lambda: torch.nn.Parameter(torch.ones(2)), 1, 0),  # a subclass of Tensor
    (lambda: _Double.apply(torch.ones(2, requires_grad=True)), 2, 2),  # a custom Function's node, and its leaf's
    (lambda: (torch.ones(2, requires_grad=True) * 3).grad_fn, 1, 2),  # a node: its leaf lives on in the graph
    # claims to be one through __class__: isinstance would say yes; it holds no tensor memory
    (lambda: type("NotATensor", (), {"__class__": torch.Tensor})(), 0, 0),
])
def test_counts_by_type_are_what_isinstance_counts(stats, make, tensors, nodes):
    """Counts classify each object by its type, once per type: subclasses count as isinstance says."""
    stats.on_step(1)  # frozen: only what is made below is seen
    base = memstats.count()
    held = [make() for _ in range(3)]
    got = memstats.count()
    assert (got[0] - base[0], got[1] - base[1]) == (3 * tensors, 3 * nodes)
    del held


def _tensors():
    return [torch.zeros(1000)]


def _views():
    a = torch.zeros(1000)
    return [a, a[10:], a.view(10, 100), a.view(100, 10).t()]


def _two():
    return [torch.zeros(1000), torch.zeros(500, dtype=torch.float64)]


def _scalars():  # valid-no-grad-only's history: a 0-dim tensor per evaluation, no graph
    return [torch.tensor(float(i)) for i in range(96)]


def _kept_graphs():  # partial-keep-last-8's history: 8 losses, each with its graph
    w = torch.ones(64, 64, requires_grad=True)
    return [w, *((w * float(i)).sum() for i in range(8))]


@pytest.mark.parametrize("make, tensors, nbytes, nodes", [
    (_tensors, 1, 4000, 0),
    (_views, 4, 4000, 0),                   # views share their base's storage: counted once
    (_two, 2, 8000, 0),
    (_scalars, 96, 96 * 4, 0),              # 96 more tensors, 384 bytes: a count, not a leak
    (_kept_graphs, 9, 64 * 64 * 4 + 8 * 4, 8 * 2 + 1),  # each graph: sum and mul; w's AccumulateGrad once
])
def test_counts_and_bytes_of_what_is_kept(stats, make, tensors, nbytes, nodes):
    stats.on_step(1)
    before = memstats.count()
    kept = make()
    after = memstats.count()
    got = (after[0] - before[0], after[2] - before[2], after[1] - before[1])
    assert got == (tensors, nbytes, nodes)
    del kept
