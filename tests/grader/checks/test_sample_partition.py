"""sample_partition on hand-built ledgers: partitions, orders, duplicates, gaps."""

from __future__ import annotations

import pytest

from grader.checks import run_check
from tests.grader.fakes import W, ctx_for, epochs, perm, spec


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


# -- across a kill and restart, with and without loader workers reading ahead ----------------------
# 64 samples, 2 ranks, 4 per rank and step, 16 steps (2 epochs). The resume run's rank is killed
# after step 10 and restarts from the state after step 6 (its checkpoint): 24 samples in.
PER, KILL, RESUMED = 4, 10, 6


def _batches(order: list[int], first: int, last: int, swap: bool) -> list[int]:
    """The reads of batches ``first``..``last`` - 1 (0-based steps) in ledger order; ``swap``: two
    loader workers' batches arrive pairwise out of order, as the parent receives them."""
    bs = [order[b * PER:(b + 1) * PER] for b in range(first, last)]
    if swap:
        for j in range(0, len(bs) - 1, 2):
            bs[j], bs[j + 1] = bs[j + 1], bs[j]
    return [i for b in bs for i in b]


def _write_ledger(b, r: int, reads: list[int], attempt: int, t0: float, prefetch: int | None, workers: bool,
                  skip: int = 0):
    """``prefetch``: batches read ahead of the steps (receive times set so, the steps at t0 + 1,
    t0 + 2, ...); None: no receive times. ``workers``: a read's ``s`` is the step its worker was
    forked at (the epoch's first), else the steps made when it was read. ``skip``: the first
    ``skip`` batches are read at once, before the first step, and discarded."""
    for j, i in enumerate(reads):
        more = {} if prefetch is None else {"rt": max(t0 + 0.1, t0 + j // PER - skip + 0.5 - prefetch)}
        b.sample(r, i, attempt=attempt, step=0 if workers else max(0, j // PER - skip), **more)


def _resume_ctx(tmp_path, a1_of, prefetch: int | None = 0, swap: bool = False, skip: int = 0):
    """The main run and the resume run; ``a1_of(order)``: attempt 1's reads of the rank's
    uninterrupted order (before jitter); ``skip``: steps' worth of them read and discarded before
    the restart's first step."""
    from grader.checks import Context
    from grader.evidence import load_run
    from tests.grader.fakes import FakeManifest
    from tests.grader.rundirs import RunDirBuilder

    orders = epochs([perm(0), perm(1)])
    main, res = RunDirBuilder(tmp_path / "main"), RunDirBuilder(tmp_path / "resume")
    ahead = prefetch or 0
    for r in range(W):
        for s in range(1, 17):
            main.event(r, kind="step", attempt=0, t=float(s), step=s, dt=1.0, rss_mb=1.0)
        main.exit(r, t=17.0, steps=16)
        _write_ledger(main, r, _batches(orders[r], 0, 16, swap), 0, 0.0, prefetch, swap)
        res.event(r, kind="fingerprint0", attempt=0, t=0.0, fp=0.0)
        for s in range(1, KILL + 1):
            res.event(r, kind="step", attempt=0, t=float(s), step=s, dt=1.0, rss_mb=1.0, fp=float(s))
        _write_ledger(res, r, _batches(orders[r], 0, KILL + ahead, swap), 0, 0.0, prefetch, swap)
        res.event(r, kind="fingerprint0", attempt=1, t=100.0, fp=float(RESUMED))
        for s in range(1, 17 - RESUMED):
            res.event(r, kind="step", attempt=1, t=100.0 + skip + s, step=s, dt=1.0, rss_mb=1.0, fp=100.0 + s)
        res.exit(r, attempt=1, t=120.0, steps=16 - RESUMED)
        a1 = a1_of(orders[r])
        _write_ledger(res, r, _batches(a1, 0, len(a1) // PER, swap) + a1[len(a1) // PER * PER:], 1, 100.0 + skip,
                      prefetch, swap, skip)
    m = FakeManifest()
    return Context(m, {"main": load_run("main", main.build()), "resume": load_run("resume", res.build())})


K = RESUMED * PER


def _reversed_batches(o: list[int]) -> list[int]:
    return [i for b in reversed(range(RESUMED, 16)) for i in o[b * PER:(b + 1) * PER]]


@pytest.mark.parametrize("prefetch, swap, a1_of, passed, says", [
    (0, False, lambda o: o[K:], True, "consumed exactly what an uninterrupted run consumes"),
    # two workers, two batches read ahead, batches received pairwise out of order: the same samples
    (2, True, lambda o: o[K:], True, "consumed exactly what an uninterrupted run consumes"),
    # ... read and in order, not the workers' business: a restart from the epoch's start replays
    (2, True, lambda o: o[:], False, "had already been consumed and trained on before the kill; 24 samples were "
                                     "replayed"),
    (0, False, lambda o: o[K - PER:], False, "4 samples were replayed"),       # one step
    (2, True, lambda o: o[K + PER:], False, "samples were skipped"),
    (1, True, _reversed_batches, False, "did not continue the uninterrupted sequence"),  # 20 out of place, past 16
    # without receive times nothing tells reading ahead from replaying: compared exactly
    (None, True, lambda o: o[K:], False, "before the kill rank 0 consumed something other than an uninterrupted run"),
])
def test_a_restart_is_judged_with_the_loader_read_ahead_as_tolerance(tmp_path, prefetch, swap, a1_of, passed, says):
    c = run_check(spec("sample_partition", resume=True, kill_step=KILL), _resume_ctx(tmp_path, a1_of, prefetch, swap))
    assert c.passed is passed and says in c.message, c.message
    if passed:
        assert c.evidence["resume"][0].get("order_tolerance", 0) == (2 * (prefetch * PER + PER) if prefetch else 0)


@pytest.mark.parametrize("prefetch, discarded, skip, passed", [
    (0, 2, 2, True),    # the epoch's first 2 steps' batches read and discarded before the first step, as accelerate does
    (2, 4, 4, True),    # ... 4 steps' worth, with loader workers prefetching 2 batches
    (2, 4, 0, False),   # no time spent skipping: the 4 re-read batches were trained on (a replay)
    # a replay no longer than the prefetch reads like a skip: the trajectory is what tells them apart
    (2, 1, 0, True),
])
def test_a_restart_that_reads_and_discards_with_workers(tmp_path, prefetch, discarded, skip, passed):
    c = run_check(spec("sample_partition", resume=True, kill_step=KILL),
                  _resume_ctx(tmp_path, lambda o: o[K - discarded * PER:], prefetch, swap=bool(prefetch), skip=skip))
    assert c.passed is passed, c.message
    if passed:
        assert c.evidence["resume"][0]["read_and_discarded"] == discarded * PER


@pytest.mark.parametrize("got, want, d", [
    ([1, 2, 3, 4], [1, 2, 3, 4], 0),
    ([2, 1, 4, 3], [1, 2, 3, 4], 1),
    ([3, 4, 1, 2], [1, 2, 3, 4], 2),
    ([1, 2, 1, 2], [1, 2, 3, 4], 2),   # a replayed stretch
    ([], [1, 2], 0),
])
def test_drift_is_how_far_a_prefix_strays(got, want, d):
    from grader.checks.sample_partition import drift

    assert drift(got, want) == d
