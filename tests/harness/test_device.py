"""Which device a launch resolves to, for each request and GPU count (no GPU needed: the count is
stubbed), and what the run summary says when ranks share a GPU."""
from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from grader import console
from harness import launch as launch_mod
from harness.errors import LaunchError
from harness.launch import RunResult, resolve_device


@pytest.mark.parametrize("requested,nproc,gpus,expected", [
    ("cpu", 2, 8, ("cpu", 0)),
    ("auto", 2, 0, ("cpu", 0)),
    ("auto", 2, 1, ("cpu", 0)),  # a script that puts rank r on cuda:r would find no cuda:1
    ("auto", 2, 2, ("cuda", 2)),
    ("auto", 1, 1, ("cuda", 1)),
    ("cuda", 1, 1, ("cuda", 1)),
    ("cuda", 2, 1, ("cuda", 1)),  # asked for: the ranks share the GPU
    ("cuda", 4, 2, ("cuda", 2)),
])
def test_resolve_device(monkeypatch, requested, nproc, gpus, expected):
    monkeypatch.setattr(launch_mod, "gpu_count", lambda: gpus)
    assert resolve_device(requested, nproc) == expected


def test_cuda_without_a_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(launch_mod, "gpu_count", lambda: 0)
    with pytest.raises(LaunchError, match="^--device cuda needs a GPU, none is visible; use --device cpu$"):
        resolve_device("cuda", 1)


def _summary(monkeypatch, device: str, gpus: int, world_size: int = 2) -> str:
    buf = io.StringIO()
    monkeypatch.setattr(console, "out", Console(file=buf, width=160, no_color=True))
    res = RunResult(status="ok", run_dir=Path("/r"), world_size=world_size, wall_s=1.0, exit_code=0,
                    ranks=[], device=device, gpus=gpus)
    console.run_summary(res)
    return buf.getvalue()


@pytest.mark.parametrize("device,gpus,shown", [
    ("cuda", 1, "device cuda (2 ranks share 1 GPU)"),
    ("cuda", 2, "device cuda  wall"),
    ("cpu", 0, "device cpu  wall"),
])
def test_the_summary_says_when_ranks_share_a_gpu(monkeypatch, device, gpus, shown):
    assert shown in _summary(monkeypatch, device, gpus)


def test_run_json_records_the_gpus_seen():
    res = RunResult(status="ok", run_dir=Path("/r"), world_size=2, wall_s=1.0, exit_code=0, ranks=[],
                    device="cuda", gpus=1)
    assert res.to_json()["gpus"] == 1
