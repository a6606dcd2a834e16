"""Limits: what they accept, how the parent measures disk from outside, what a violation says."""

from __future__ import annotations

import os

import pytest

from harness.limits import MB, LimitGuard, Limits, LimitsError, Violation, disk_usage


@pytest.mark.parametrize("change, match", [
    ({"memory_mb": 0}, "memory_mb=0 must be positive"),
    ({"processes": -1}, "processes=-1 must be positive"),
    ({"memory_mb": 100}, "give at least 256"),
    ({"tasks": 10}, "give at least 64"),
    ({"log_mb": 0.0}, "log_mb=0.0 must be positive"),
])
def test_limits_refuse_what_cannot_run(change, match):
    with pytest.raises(LimitsError, match=match):
        Limits(**change).validate()


def test_default_limits_are_valid():
    Limits().validate()


def test_disk_usage_counts_allocated_bytes_and_never_follows_links(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.bin").write_bytes(os.urandom(1 << 20))
    with open(tmp_path / "sparse.bin", "wb") as f:  # 1 GiB apparent, almost nothing allocated
        f.truncate(1 << 30)
    os.symlink("/usr", tmp_path / "usr")  # never walked into
    os.mkfifo(tmp_path / "fifo")  # stat only: a FIFO never blocks the walk
    du = disk_usage([tmp_path], max_entries=100)
    assert (1 << 20) <= du.bytes < (2 << 20)
    assert du.files == 5 and not du.truncated


def test_disk_usage_stops_at_the_entry_limit(tmp_path):
    for i in range(50):
        (tmp_path / f"f{i}").write_bytes(b"x")
    du = disk_usage([tmp_path], max_entries=10)
    assert du.truncated and du.files == 11


@pytest.mark.parametrize("v, text", [
    (Violation("memory", 5120.4, 4096, rank=1, pid=7), "rank 1 used 5120 MiB, over the memory limit of 4096 MiB"),
    (Violation("processes", 70, 64), "the run had 70 live processes, over the processes limit of 64"),
    (Violation("disk", 3000, 2048), "the run wrote 3000 MiB, over the disk limit of 2048 MiB"),
    (Violation("files", 20001, 20000), "the run created 20001 files, over the files limit of 20000"),
])
def test_violation_messages(v, text):
    assert v.message == text and v.to_json()["message"] == text


def test_guard_checks_each_limit(tmp_path):
    (tmp_path / "big").write_bytes(os.urandom(3 * MB))
    guard = LimitGuard(Limits(memory_mb=500, processes=4, disk_mb=2), [tmp_path])
    assert [v.rank for v in guard.check_memory({0: (499.0, 10), 1: (501.0, 11)})] == [1]
    assert guard.check_processes(4) == [] and guard.check_processes(5)[0].value == 5
    assert [v.what for v in guard.check_disk()] == ["disk"]
