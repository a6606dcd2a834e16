"""Run dirs for the common case (steps, ledgers, final parameters), built with the one builder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.grader.rundirs import KEY, RunDirBuilder

__all__ = ["KEY", "RunDirBuilder", "make_run"]


def make_run(root: Path, world_size: int = 2, steps: int = 10, status: str = "ok",
             rss: list[float] | None = None, ledgers: dict[int, list[int]] | None = None,
             params: dict[int, dict[str, torch.Tensor]] | None = None,
             attempts: dict[int, list[dict[str, Any]]] | None = None, dataset: str = "train",
             killed: tuple[int, ...] = (), step_dt: float = 1.0) -> Path:
    """A finished run: ``steps`` step records per rank (RSS from ``rss``), the given ledger
    indices, and final params per rank. ``attempts`` adds raw records per rank (restart tests);
    ranks in ``killed`` leave no exit record and no final params, as after a SIGKILL; steps come
    ``step_dt`` seconds apart (1 / steps/s)."""
    b = RunDirBuilder(root, world_size, status)
    for r in range(world_size):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        for s in range(steps):
            b.event(r, kind="step", attempt=0, t=s * step_dt, step=s + 1, dt=0.01,
                    rss_mb=(rss[s] if rss else 100.0), lr=[0.1])
        for rec in (attempts or {}).get(r, []):
            b.event(r, **rec)
        if r not in killed:
            b.exit(r, params[r] if params is not None else None, t=float(steps), steps=steps)
        for i in (ledgers or {}).get(r, []):
            b.sample(r, i, dataset)
    return b.build()
