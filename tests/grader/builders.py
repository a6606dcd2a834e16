"""Hand-built run dirs, signed like the harness signs them, for testing checks without launching."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from harness import rundir

KEY = "0123456789abcdef0123456789abcdef"


def make_run(root: Path, world_size: int = 2, steps: int = 10, status: str = "ok",
             rss: list[float] | None = None, ledgers: dict[int, list[int]] | None = None,
             params: dict[int, dict[str, torch.Tensor]] | None = None,
             attempts: dict[int, list[dict[str, Any]]] | None = None, dataset: str = "train",
             killed: tuple[int, ...] = (), step_dt: float = 1.0) -> Path:
    """A finished run: ``steps`` step records per rank (RSS from ``rss``), the given ledger
    indices, and final params per rank. ``attempts`` adds raw records per rank (restart tests);
    ranks in ``killed`` leave no exit record and no final params, as after a SIGKILL; steps come
    ``step_dt`` seconds apart (1 / steps/s)."""
    root.mkdir(parents=True, exist_ok=True)
    for r in range(world_size):
        d = rundir.rank_dir(root, r)
        ev = rundir.RecordWriter(d / rundir.EVENTS, KEY)
        ev.write({"kind": "start", "attempt": 0, "t": 0.0, "pid": 1, "rank": r})
        for s in range(steps):
            ev.write({"kind": "step", "attempt": 0, "t": s * step_dt, "step": s + 1, "dt": 0.01,
                      "rss_mb": (rss[s] if rss else 100.0), "lr": [0.1]})
        for rec in (attempts or {}).get(r, []):
            ev.write(rec)
        exit_rec = {"kind": "exit", "attempt": 0, "t": float(steps), "status": "ok", "code": 0,
                    "steps": steps, "error": None}
        if params is not None and r not in killed:
            torch.save(params[r], d / rundir.FINAL_PARAMS)
            exit_rec.update(params_sha256=rundir.sha256_file(d / rundir.FINAL_PARAMS),
                            numel=sum(t.numel() for t in params[r].values()))
        if r not in killed:
            ev.write(exit_rec)
        ev.close()
        led = rundir.RecordWriter(d / rundir.SAMPLES, KEY)
        for n, i in enumerate((ledgers or {}).get(r, [])):
            led.write({"a": 0, "ds": dataset, "i": i, "s": 0})
        led.close()
    rundir.atomic_write_json(root / "run.json", {"schema_version": 1, "key": KEY, "status": status,
                                                 "world_size": world_size, "wall_s": 1.0})
    return root
