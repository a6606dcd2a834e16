"""Stand-ins the check tests share: the bits of a manifest checks read, ledgers of a correct
DistributedSampler, and a context over hand-built run dirs (``tests/grader/rundirs.py``)."""

from __future__ import annotations

import random
from pathlib import Path

from grader.checks import REGISTRY, Context
from grader.evidence import load_run
from grader.manifest import Workload
from tests.grader.builders import make_run

N, W = 64, 2


class FakeManifest:  # the bits of a manifest checks read
    def __init__(self, **kw):
        self.world_size = kw.get("world_size", W)
        self.workload = Workload(dataset_size=N, global_batch=8, steps=kw.get("steps", 16), params=3)
        self.run = type("R", (), {"timeout": 60.0})()


def spec(name: str, **fields):
    """A check's manifest table, validated by the check's own spec model."""
    return REGISTRY[name].spec(name=name, **fields)


def epochs(orders: list[list[int]]) -> dict[int, list[int]]:
    """Ledgers of a correct DistributedSampler: rank r takes order[r::W] of each epoch."""
    return {r: [i for o in orders for i in o[r::W]] for r in range(W)}


def perm(seed: int) -> list[int]:
    xs = list(range(N))
    random.Random(seed).shuffle(xs)
    return xs


def ctx_for(tmp_path: Path, **runs) -> Context:
    return Context(FakeManifest(), {role: load_run(role, make_run(tmp_path / role, **kw)) for role, kw in runs.items()})
