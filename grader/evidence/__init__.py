"""Everything a check may look at, loaded from a finished run dir and verified.

Only records signed with the run's key count; lines the script wrote itself are counted as forged.
Final parameters count only when their sha256 matches the one in the rank's signed exit event.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from grader.evidence import saves
from grader.evidence import traffic as traffic_mod
from grader.evidence.store import StoreLog, read_store
from grader.evidence.watched import Watched, read_watched
from harness import fetches, rundir
from harness.isolation import PROC_SAMPLES
from harness.observe import RankObservation, observe_rank

LEDGER_CAP = 1_000_000  # items per rank: the largest grading reads about 105k; as many dicts as 64 MB of per-item lines held


def _training_reads(loads: dict[int, list[dict[str, Any]]]) -> dict[int, list[dict[str, Any]]]:
    """Each rank's loader records as ledger entries, without the direct reads of a dataset some
    DataLoader fetched (``harness.fetches.without_probes``: the run's summary reads them the same way)."""
    return {r: ledger_entries(recs) for r, recs in fetches.without_probes(loads).items()}


def ledger_entries(records: list[dict[str, Any]], cap: int = LEDGER_CAP) -> list[dict[str, Any]]:
    """One entry per item read: a batch record (``"i"`` a list, one fetch) becomes one entry per
    index, in order, each with the batch's other fields. What the rank sent is only signed, not
    trusted: a record whose ``"i"`` is not an int or a list of ints is not a read, and past ``cap``
    items the rest are dropped (the grader's memory stays bounded; any exercise's checks then find
    samples missing)."""
    out: list[dict[str, Any]] = []
    for rec in records:
        i = rec.get("i")
        if type(i) is int:
            out.append(rec)
        elif type(i) is list and all(type(x) is int for x in i):
            out.extend({**rec, "i": x} for x in i[:max(0, cap - len(out))])
        if len(out) >= cap:
            del out[cap:]
            break
    return out


class EnvironmentFailure(Exception):
    """The harness or the machine failed, not the submission: grading cannot say anything."""


def _fetched(loads: dict[int, list[dict[str, Any]]]) -> Counter[str]:
    """Samples fetched per loader dataset identity."""
    return Counter(x["ds"] for recs in loads.values() for x in recs if isinstance(x.get("ds"), str))


@dataclass
class RunEvidence:
    role: str
    run_dir: Path
    run: dict[str, Any]
    ranks: dict[int, RankObservation]
    ledgers: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    forged: int = 0
    adopted: dict[str, str] = field(default_factory=dict)  # adopt_loader_ledger: manifest name -> loader dataset
    _events: dict[int, list[dict[str, Any]]] = field(default_factory=dict, repr=False)
    _proc: dict[int, list[dict[str, Any]]] = field(default_factory=dict, repr=False)

    @property
    def status(self) -> str:
        status: str = self.run.get("status", "unknown")
        return status

    @property
    def world_size(self) -> int:
        return int(self.run.get("world_size", 0))

    @property
    def key(self) -> str:
        key: str = self.run["key"]
        return key

    @property
    def sandboxed(self) -> bool:
        """Whether the run's processes ran in the sandbox (harness.isolation): then memory, CPU time
        and the parent's receive times are measured outside the candidate's reach."""
        return bool((self.run.get("sandbox") or {}).get("isolated"))

    def proc_samples(self, rank: int) -> list[dict[str, Any]]:
        """The parent's signed outside samples of the rank (``proc.jsonl``: RSS, CPU time, threads,
        processes every half second), every attempt; empty for an unsandboxed run."""
        if rank not in self._proc:
            path = rundir.rank_dir(self.run_dir, rank) / PROC_SAMPLES
            self._proc[rank] = rundir.read_records(path, self.key).valid
        return self._proc[rank]

    @cached_property
    def backend(self) -> str | None:
        """The process-group backend rank 0 initialised, from its signed pg_init event."""
        recs = rundir.read_records(rundir.rank_dir(self.run_dir, 0) / rundir.EVENTS, self.key)
        return next((r.get("backend") for r in recs.valid if r.get("kind") == "pg_init"), None)

    def events(self, rank: int) -> list[dict[str, Any]]:
        """The rank's verified event records, every attempt."""
        if rank not in self._events:
            path = rundir.rank_dir(self.run_dir, rank) / rundir.EVENTS
            self._events[rank] = rundir.read_records(path, self.key).valid
        return self._events[rank]

    def collective_records(self, rank: int) -> list[dict[str, Any]]:
        """The rank's verified collective trace, every attempt."""
        path = rundir.rank_dir(self.run_dir, rank) / rundir.COLLECTIVES
        return rundir.read_records(path, self.key).valid

    @cached_property
    def traffic(self) -> traffic_mod.Traffic | None:
        """The collective trace's claims against the bytes the run's loopback carried (sandboxed runs)."""
        return traffic_mod.measure([s for r in self.ranks for s in self.proc_samples(r)],
                                   [c for r in self.ranks for c in self.collective_records(r)])

    @cached_property
    def save_records(self) -> dict[int, list[dict[str, Any]]]:
        """Each rank's verified save trace, every attempt, begin and end records apart."""
        return {r: rundir.read_records(rundir.rank_dir(self.run_dir, r) / rundir.SAVES, self.key).valid
                for r in self.ranks}

    @cached_property
    def file_ops(self) -> list[saves.FileOp]:
        """Every traced write of the script (torch.save, rename, copy, a file DCP wrote), on every
        rank, in start order."""
        return saves.file_ops(self.save_records)

    @cached_property
    def file_loads(self) -> list[saves.FileOp]:
        """Every traced torch.load of a file (and every file DCP read) by the script, on every rank,
        in start order."""
        return saves.file_ops(self.save_records, kinds=("load",))

    @cached_property
    def file_commits(self) -> list[saves.FileOp]:
        """DCP checkpoints finished by their coordinator: folder, files listed, keys."""
        return saves.file_ops(self.save_records, kinds=("commit",))

    @cached_property
    def file_uploads(self) -> list[saves.FileOp]:
        """The script's calls of ArtifactStore.upload, as the rank traced them (with the store
        service's receipt id); whether they count is the store's log's to say (``store``)."""
        return saves.file_ops(self.save_records, kinds=("upload",))

    @cached_property
    def file_history(self) -> dict[str, saves.FileState]:
        """Per destination path, what the trace shows was on disk when (one replay, shared by checks)."""
        return saves.file_history(self.file_ops)

    @cached_property
    def units(self) -> dict[str, saves.Unit]:
        """The checkpoints the trace saw, each as a restart reads it: a file, a folder published by
        one rename, or a DCP folder (``grader.evidence.saves.checkpoint_units``)."""
        return saves.checkpoint_units(self.file_ops, self.file_history, self.file_commits)

    @cached_property
    def store(self) -> StoreLog | None:
        """The artifact store service's own log of this run (None: the run had no store)."""
        return read_store(self.run_dir, self.key)

    @cached_property
    def watched(self) -> Watched | None:
        """What the parent saw published at the watched paths, from outside (None: nothing watched)."""
        return read_watched(self.run_dir, self.key, self.run_dir / "work")

    def adopt_loader_ledger(self, sizes: dict[str, int]) -> dict[str, str]:
        """A run that read nothing through the kit's datasets (a script that brings its own data) is
        judged on what its DataLoaders fetched (``loads.jsonl``, harness.fetches): each dataset the
        manifest names, by its length in ``sizes``, is the loader dataset of that length (the one
        fetched most where several have it; where several names share a length, ``sizes``' order
        is the order of their datasets' starts in the dataset they split, ``Subset@4096[4096]``,
        else of their first reads: the training set, then each evaluation split),
        its entries put in ``ledgers`` under the manifest's name. A run with any kit ledger entry keeps the kit's ledger alone, so no read is counted
        twice. Returns ``{manifest name: loader identity}`` of what was adopted (docs/run-dir.md)."""
        if any(self.ledgers.values()) or self.adopted:
            return self.adopted
        loads = self._loads()
        fetched = _fetched(loads)
        first: dict[str, tuple[int, int, int]] = {}  # identity -> (attempt, step, position) of its first fetch
        for recs in loads.values():
            for pos, x in enumerate(recs):
                ds = x.get("ds")
                if isinstance(ds, str):
                    at = (int(x.get("a") or 0), int(x.get("s") or 0), pos)
                    first[ds] = min(first.get(ds, at), at)
        by_length: dict[int, list[str]] = {}
        for name, n in sizes.items():
            by_length.setdefault(n, []).append(name)
        for n, names in by_length.items():
            same = [ds for ds in fetched if fetches.size_of(ds) == n]
            if len(names) == 1 and same:  # the one fetched most: a second loader over it is not another split
                self.adopted[names[0]] = max(same, key=lambda ds: (fetched[ds], ds))
            else:  # splits of one length (train and val, val and test): in the order they sit in
                # the dataset they split (a Subset's start), else in the order they are first read
                # (loader workers prefetching an evaluation split can read it before the first step)
                for name, ds in zip(names, sorted(same, key=lambda ds: (fetches.subset_start(ds), first[ds]))):
                    self.adopted[name] = ds
        by_identity = {ds: name for name, ds in self.adopted.items()}
        for r, recs in loads.items():
            self.ledgers[r] = [{**x, "ds": by_identity[x["ds"]]} for x in recs if x.get("ds") in by_identity]
        return self.adopted

    def _loads(self) -> dict[int, list[dict[str, Any]]]:
        return _training_reads({r: rundir.read_records(rundir.rank_dir(self.run_dir, r) / rundir.LOADS,
                                                       self.key).valid for r in self.ranks})

    def loader_datasets(self) -> Counter[str]:
        """How many samples the run's DataLoaders fetched from each dataset, by its identity (its
        class and length, ``SensorRecords[4096]``), whether or not the manifest names it."""
        return _fetched(self._loads())

    def adopt_for(self, workload: Any) -> dict[str, str]:
        """``adopt_loader_ledger`` with the lengths a manifest's workload names: its training dataset
        and each evaluation's (the grader's judge and the bundle's self-check both take them here)."""
        sizes = {workload.dataset: workload.dataset_size,
                 **{name: e.dataset_size or e.samples for name, e in workload.evaluations.items()}}
        return self.adopt_loader_ledger(sizes)

    def samples(self, rank: int, dataset: str, attempt: int | None = None) -> list[int]:
        return [r["i"] for r in self.ledgers.get(rank, [])
                if r.get("ds") == dataset and (attempt is None or r.get("a") == attempt)]

    def params(self, rank: int) -> dict[str, Any] | None:
        """The rank's final parameters (name -> tensor), or None when absent or not ours."""
        return self._params.get(rank)

    @cached_property
    def _params(self) -> dict[int, dict[str, Any]]:
        out = {}
        for r, obs in self.ranks.items():
            path = rundir.rank_dir(self.run_dir, r) / rundir.FINAL_PARAMS
            if not obs.params_sha256 or not path.exists() or rundir.sha256_file(path) != obs.params_sha256:
                continue
            try:
                out[r] = rundir.load_params(path)  # safetensors: nothing in it runs
            except ValueError:
                continue
        return out

    def describe(self) -> str:
        return f"the {self.role} run"


class TamperedRun(EnvironmentFailure):
    """A sealed run dir that is no longer as it was sealed: nothing in it may be judged."""


def load_run(role: str, run_dir: Path, sealed: bool = False) -> RunEvidence:
    """The run's evidence. ``sealed``: the run dir must be exactly as the grader sealed it
    (``grader.sealing``), else ``TamperedRun``."""
    run_dir = Path(run_dir)
    if sealed:
        from grader import sealing

        check = sealing.verify(run_dir)
        if not check.ok:
            raise TamperedRun(f"{role} run: {run_dir} changed after it was sealed ({check.message}); "
                              "nothing in it is judged: grade the submission again")
    try:
        run = rundir.load_run(run_dir)
    except (FileNotFoundError, ValueError) as e:
        raise EnvironmentFailure(f"{role} run: {e}") from None
    key = run.get("key")
    if not key:
        raise EnvironmentFailure(f"{role} run: {run_dir}/run.json has no key; it was not written by the harness")
    ranks, ledgers, forged = {}, {}, 0
    for r in rundir.ranks_in(run_dir):
        obs = observe_rank(run_dir, r, key)
        ranks[r] = obs
        forged += obs.forged_lines
        recs = rundir.read_records(rundir.rank_dir(run_dir, r) / rundir.SAMPLES, key)
        ledgers[r] = ledger_entries(recs.valid)
        forged += recs.forged
        forged += rundir.read_records(rundir.rank_dir(run_dir, r) / rundir.SAVES, key).forged
        forged += rundir.read_records(rundir.rank_dir(run_dir, r) / rundir.LOADS, key).forged
    log = read_store(run_dir, key)
    if log is not None:
        forged += log.forged
    seen = read_watched(run_dir, key, run_dir / "work")
    if seen is not None:
        forged += seen.forged
    return RunEvidence(role=role, run_dir=run_dir, run=run, ranks=ranks, ledgers=ledgers, forged=forged)


def harness_failed(ev: RunEvidence) -> str | None:
    """Why a run says nothing about the submission: no rank ever started (the launcher, the
    rendezvous or the interpreter broke), or the job was interrupted."""
    if ev.status == "interrupted":
        return f"{ev.describe()} was interrupted"
    if ev.status == "limit":  # whenever it came, a cap the run went past is the run's own doing
        return None
    if not ev.ranks or not any(o.attempts for o in ev.ranks.values()):
        tail = ""
        log = ev.run_dir / "launcher.log"
        if log.exists():
            lines = log.read_text(errors="replace").strip().splitlines()
            tail = f": {lines[-1]}" if lines else ""
        return f"{ev.describe()} never started a rank{tail}"
    return None
