"""The recorder's per-step readings, in this process (what a launched job records: test_launch)."""

from __future__ import annotations

import os

import psutil
import pytest

from harness.instrument import _RssReader


def psutil_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def close_to_psutil(mb: float) -> bool:
    """Within what this process may allocate between two readings."""
    return abs(mb - psutil_mb()) < 8


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="no /proc on this system")
def test_rss_is_read_from_one_open_statm():
    r = _RssReader()
    assert close_to_psutil(r.mb())
    fd = r._fd
    assert fd is not None and r._proc is None
    ballast = bytearray(64 << 20)  # touched: resident
    ballast[::4096] = b"x" * len(ballast[::4096])
    assert close_to_psutil(r.mb()) and r._fd == fd  # the same file, read again
    del ballast


@pytest.mark.parametrize("content", [None, "", "not statm\n"])
def test_without_a_readable_statm_psutil_reads_it(tmp_path, content):
    path = tmp_path / "statm"
    if content is not None:
        path.write_text(content)
    r = _RssReader(str(path))
    assert close_to_psutil(r.mb()) and close_to_psutil(r.mb())
    assert r._proc is not None


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="no /proc on this system")
def test_a_forked_child_reads_its_own_statm():
    """/proc/self names the process that opened it: after a fork the parent's open file would
    report the parent."""
    r = _RssReader()
    r.mb()
    pid = os.fork()
    if pid == 0:
        ballast = bytearray(96 << 20)
        ballast[::4096] = b"x" * len(ballast[::4096])
        mb = r.mb()
        os._exit(0 if r._pid == os.getpid() and close_to_psutil(mb) else 1)  # the ballast shows
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


class _Group:
    pass


@pytest.fixture
def registry(monkeypatch):
    """A stand-in for torch's process-group registry, with nothing kept yet."""
    from types import SimpleNamespace

    from harness import instrument

    pg_map: dict = {}
    monkeypatch.setattr(instrument, "_c10d", lambda: SimpleNamespace(_world=SimpleNamespace(pg_map=pg_map)))
    monkeypatch.setattr(instrument, "_kept_groups", [])
    monkeypatch.setattr(instrument, "_kept_seen", set())
    return pg_map


def test_every_group_made_is_kept_across_destroys(registry):
    from harness import instrument

    world, a, b, c = _Group(), _Group(), _Group(), _Group()
    instrument.keep_process_groups()  # an empty registry: nothing to keep
    registry[world] = "world"
    registry[a] = "a"
    instrument.keep_process_groups()
    assert instrument._kept_groups == [world, a]
    del registry[a]  # destroyed: still kept; then one made in its place, as many groups as before
    registry[b] = "b"
    instrument.keep_process_groups()
    del registry[b]
    registry[c] = "c"
    instrument.keep_process_groups()
    assert instrument._kept_groups == [world, a, b, c]
    instrument.keep_process_groups()  # nothing new
    assert instrument.kept_process_groups() == 4


# The allocator's statistics as torch.cuda.memory_stats_as_nested_dict gives them (a few of them).
NESTED = {"allocated_bytes": {"all": {"current": 3 * 2**20, "peak": 7 * 2**20, "allocated": 9, "freed": 8},
                              "small_pool": {"current": 1, "peak": 2}},
          "num_alloc_retries": 0, "reserved_bytes": {"all": {"current": 8 * 2**20, "peak": 8 * 2**20}}}


@pytest.mark.parametrize("nested, want", [(NESTED, (3.0, 7.0)), ({}, (0.0, 0.0))])
def test_cuda_memory_is_what_torch_s_own_calls_report(monkeypatch, nested, want):
    """One nested read per step gives what memory_allocated() and max_memory_allocated() give (each
    of which flattens every statistic); stats without the key fall back to those calls."""
    import torch

    from harness import instrument

    monkeypatch.setattr(torch.cuda.memory, "memory_stats_as_nested_dict", lambda device=None: nested)
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict", lambda device=None: nested)
    by_torch = (torch.cuda.memory_allocated() / 2**20, torch.cuda.max_memory_allocated() / 2**20)
    assert instrument._cuda_allocated_mb() == by_torch == want
