"""Every exercise script and reference solution picks its backend the same way: NCCL only where each
rank of the node has a GPU of its own, gloo where ranks share one or there is none (docs/design.md, GPU).
The scripts are loaded as modules (their ``main`` is not run) with the GPU count stubbed."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from tests.conftest import REPO

SCRIPTS = sorted(p for base in ("exercises", "solutions") for p in (REPO / base).glob("*/train.py"))


def _load(path):
    spec = importlib.util.spec_from_file_location(f"_tw_{path.parent.parent.name}_{path.parent.name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
@pytest.mark.parametrize("gpus,local_world_size,nccl", [
    (0, 1, False), (0, 2, False),
    (1, 1, True),
    (1, 2, False),  # two ranks on one GPU: NCCL would refuse them
    (2, 2, True), (8, 4, True), (2, 4, False),
])
def test_nccl_only_with_a_gpu_per_rank(monkeypatch, path, gpus, local_world_size, nccl):
    mod = _load(path)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world_size))
    assert mod.gpu_per_rank() is nccl


def test_every_script_is_covered():
    """Each script exercise the kit discovers, its train.py and its reference solution's."""
    from grader.exercises import Exercise, discover

    found, _ = discover()
    slugs = sorted(e.slug for e in found if isinstance(e, Exercise))
    assert slugs and SCRIPTS == sorted(REPO / base / s / "train.py" for base in ("exercises", "solutions") for s in slugs)
