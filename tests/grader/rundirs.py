"""The one builder of signed run dirs for tests that judge without launching: records go in per
rank and file, and ``build()`` writes them signed as the harness would, with the final parameters
and run.json. Every helper that fakes a run (``make_run`` and the per-check ones) goes through it,
so a change of the record format changes one place."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from harness import rundir

KEY = "0123456789abcdef0123456789abcdef"


class RunDirBuilder:
    def __init__(self, root: Path, world_size: int = 2, status: str = "ok", **run_json: Any):
        self.root = Path(root)
        self.world_size = world_size
        self.run_json = {"schema_version": 1, "key": KEY, "status": status, "world_size": world_size,
                         "wall_s": 1.0, **run_json}
        self.records: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
        self.final: dict[int, tuple[dict[str, torch.Tensor], dict[str, Any]]] = {}
        self.store_records: list[dict[str, Any]] = []  # the artifact store service's own log
        self.watch_records: list[dict[str, Any]] = []  # the parent's watcher of published files

    @property
    def work(self) -> Path:
        return self.root / "work"

    def add(self, rank: int, file: str, /, **record: Any) -> RunDirBuilder:
        self.records[(rank, file)].append(record)
        return self

    def event(self, rank: int, /, **record: Any) -> RunDirBuilder:
        return self.add(rank, rundir.EVENTS, **record)

    def sample(self, rank: int, index: int, dataset: str = "train", attempt: int = 0, step: int = 0, **more: Any):
        """A ledger record; ``more``: fields the parent adds (``rt``, its receive time)."""
        return self.add(rank, rundir.SAMPLES, a=attempt, ds=dataset, i=index, s=step, **more)

    def load(self, rank: int, dataset: str, indices: list[int] | int, attempt: int = 0, step: int = 0,
             **more: Any) -> RunDirBuilder:
        """A loader record (loads.jsonl, harness.fetches): one DataLoader fetch of ``dataset`` (its
        loader identity, e.g. ``Rows[64]``)."""
        return self.add(rank, rundir.LOADS, a=attempt, ds=dataset, i=indices, s=step, **more)

    def save_record(self, rank: int, /, **record: Any) -> RunDirBuilder:
        return self.add(rank, rundir.SAVES, **record)

    def store(self, raw: bytes | None = None, **record: Any) -> RunDirBuilder:
        """A record of the artifact store service's log (store.jsonl, in the run dir itself); with
        ``raw`` the service's kept copy of what the upload carried (``kept``)."""
        if raw is not None:
            from harness.store_service import KEPT_DIR

            name = f"{int(record.get('id') or 0):06d}.bin"
            p = self.root / KEPT_DIR / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(raw)
            record = {**record, "kept": name}
        self.store_records.append(record)
        return self

    def watched(self, obj: Any = None, raw: bytes | None = None, **record: Any) -> RunDirBuilder:
        """A record of the parent's file watcher (watch.jsonl); with ``obj`` (torch.save'd) or ``raw``
        the version's kept copy, whose size and sha256 the record carries."""
        if obj is not None or raw is not None:
            from harness.filewatch import KEPT_DIR

            name = f"{len(self.watch_records) + 1:06d}.bin"
            p = self.root / KEPT_DIR / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(raw) if raw is not None else torch.save(obj, p)
            record = {"kind": "version", "kept": name, "bytes": p.stat().st_size,
                      "sha256": rundir.sha256_file(p), **record}
        self.watch_records.append(record)
        return self

    def exit(self, rank: int, params: dict[str, torch.Tensor] | None = None, attempt: int = 0, t: float = 0.0,
             steps: int = 0, **extra: Any) -> RunDirBuilder:
        """The rank's exit record; with ``params`` also its final_params.safetensors, whose sha256 the
        record carries (as the bootstrap writes them)."""
        rec = {"kind": "exit", "attempt": attempt, "t": t, "status": "ok", "code": 0, "steps": steps,
               "error": None, **extra}
        if params is not None:
            self.final[rank] = (params, rec)
        else:
            self.event(rank, **rec)
        return self

    def file(self, rel: str, obj: Any = None, raw: bytes | None = None) -> RunDirBuilder:
        """A file the script left in its working dir."""
        p = self.work / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if raw is not None:
            p.write_bytes(raw)
        else:
            torch.save(obj, p)
        return self

    def build(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        for rank, (params, rec) in self.final.items():
            d = rundir.rank_dir(self.root, rank)
            d.mkdir(parents=True, exist_ok=True)
            rundir.save_params(params, d / rundir.FINAL_PARAMS)
            self.event(rank, **rec, params_sha256=rundir.sha256_file(d / rundir.FINAL_PARAMS),
                       numel=sum(t.numel() for t in params.values()))
        self.final = {}
        for r in range(self.world_size):  # every rank has a dir, even one that wrote nothing
            rundir.rank_dir(self.root, r).mkdir(parents=True, exist_ok=True)
        for (rank, file), recs in self.records.items():
            w = rundir.RecordWriter(rundir.rank_dir(self.root, rank) / file, KEY)
            for rec in recs:
                w.write(rec)
            w.close()
        self.records.clear()
        if self.store_records:
            w = rundir.RecordWriter(self.root / "store.jsonl", KEY)
            for rec in self.store_records:
                w.write(rec)
            w.close()
            self.store_records = []
        if self.watch_records:
            from harness.filewatch import LOG

            w = rundir.RecordWriter(self.root / LOG, KEY)
            for rec in self.watch_records:
                w.write(rec)
            w.close()
            self.watch_records = []
        rundir.atomic_write_json(self.root / "run.json", self.run_json)
        return self.root
