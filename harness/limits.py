"""Limits of one sandboxed run, and the parent's check of them from outside.

Each limit is enforced where it is cheapest and hardest to dodge:

- in the kernel, set inside the sandbox before anything of the run starts (``harness.sandbox``):
  tasks (RLIMIT_NPROC, threads included), the size of any one file (RLIMIT_FSIZE), core dumps off,
  and the private ``/tmp`` and ``/dev/shm`` as size-limited tmpfs;
- by the parent, from ``/proc`` and the file system (``LimitGuard``, fed by ``harness.procwatch``):
  memory per rank, live processes in the sandbox, and the disk used by its writable folders. A
  sampler can overshoot between two looks (an allocator at 1 GB/s gains 250 MB in 0.25 s); the
  kernel limits above bound how far;
- by the channel's server (``harness.channel_server``): log bytes per rank, truncated with a marker.

cgroup v2 ``memory.max`` / ``pids.max`` would be exact, but need a delegated, writable cgroup
v2 subtree with those controllers enabled; where there is none (cgroup v1 hosts, most containers,
this project's CI) the outside sampler is what works everywhere.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MB = 2**20


class LimitsError(ValueError):
    """A limit that cannot be applied (negative, zero, or too small to start a rank)."""


@dataclass(frozen=True)
class Limits:
    memory_mb: float = 4096.0  # resident memory of one rank and its descendants (outside sampler)
    processes: int = 64  # live processes in the sandbox, launcher and ranks included (outside sampler)
    tasks: int = 4096  # RLIMIT_NPROC in the sandbox: threads count too (a torch rank has dozens)
    disk_mb: float = 2048.0  # bytes allocated under the run's writable folders (outside sampler)
    files: int = 20_000  # entries under the writable folders (also bounds the cost of the walk)
    file_mb: float = 1024.0  # RLIMIT_FSIZE: the largest file any process of the run may write
    tmp_mb: int = 512  # the private /tmp (tmpfs, memory-backed, gone with the sandbox)
    shm_mb: int = 512  # the private /dev/shm (DataLoader workers and NCCL pass tensors there)
    log_mb: float = 16.0  # per rank and stream (stdout, stderr); the rest is dropped after a marker

    def validate(self) -> None:
        for name in ("memory_mb", "processes", "tasks", "disk_mb", "files", "file_mb", "tmp_mb",
                     "shm_mb", "log_mb"):
            if not getattr(self, name) > 0:
                raise LimitsError(f"limit {name}={getattr(self, name)!r} must be positive")
        if self.memory_mb < 256:
            raise LimitsError(f"limit memory_mb={self.memory_mb} is below what one torch rank needs "
                              "to start (about 250 MB); give at least 256")
        if self.tasks < 64:
            raise LimitsError(f"limit tasks={self.tasks} cannot start the launcher and its ranks "
                              "(each has dozens of threads); give at least 64")


@dataclass(frozen=True)
class Violation:
    """A limit the run went past, as the parent saw it."""

    what: str  # memory | processes | disk | files
    value: float
    cap: float
    rank: int | None = None
    pid: int | None = None  # outside pid the parent ended (memory), when one

    @property
    def message(self) -> str:
        unit = {"memory": " MiB", "disk": " MiB"}.get(self.what, "")
        who = f"rank {self.rank} " if self.rank is not None else "the run "
        verb = {"memory": "used", "processes": "had", "disk": "wrote", "files": "created"}[self.what]
        noun = {"processes": " live processes", "files": " files"}.get(self.what, "")
        return (f"{who}{verb} {self.value:.0f}{unit}{noun}, over the {self.what} limit of "
                f"{self.cap:.0f}{unit}")

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "value": round(self.value, 1), "cap": self.cap, "rank": self.rank,
                "pid": self.pid, "message": self.message}


@dataclass(frozen=True)
class DiskUsage:
    bytes: int
    files: int
    truncated: bool  # stopped counting at the files limit: more are there


def disk_usage(roots: list[Path], max_entries: int) -> DiskUsage:
    """Bytes allocated (``st_blocks``: a sparse file costs what it holds) and entries under
    ``roots``, never following a symlink, stopping after ``max_entries``. The walk runs as the
    parent on files the run controls, so it only stats: no open, no read, nothing that blocks on
    a FIFO."""
    total, n = 0, 0
    stack = [str(r) for r in roots]
    while stack:
        top = stack.pop()
        try:
            it = os.scandir(top)
        except OSError:  # gone meanwhile, or not a directory
            continue
        with it:
            for entry in it:
                n += 1
                if n > max_entries:
                    return DiskUsage(total, n, True)
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
    return DiskUsage(total, n, False)


class LimitGuard:
    """Checks the limits the kernel cannot enforce here, from the parent's own measurements."""

    def __init__(self, limits: Limits, writable: list[Path]):
        limits.validate()
        self.limits = limits
        self.writable = list(writable)
        self.last_disk: DiskUsage | None = None

    def check_memory(self, rank_rss_mb: dict[int, tuple[float, int]]) -> list[Violation]:
        """``rank_rss_mb``: rank -> (RSS of the rank and its descendants in MiB, outside pid)."""
        return [Violation("memory", rss, self.limits.memory_mb, rank=r, pid=pid)
                for r, (rss, pid) in sorted(rank_rss_mb.items()) if rss > self.limits.memory_mb]

    def check_processes(self, live: int) -> list[Violation]:
        return [Violation("processes", live, self.limits.processes)] if live > self.limits.processes else []

    def check_disk(self) -> list[Violation]:
        du = disk_usage(self.writable, self.limits.files)
        self.last_disk = du
        out = []
        if du.truncated:
            out.append(Violation("files", du.files, self.limits.files))
        if du.bytes / MB > self.limits.disk_mb:
            out.append(Violation("disk", du.bytes / MB, self.limits.disk_mb))
        return out
