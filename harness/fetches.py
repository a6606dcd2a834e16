"""What every DataLoader of a rank fetched, seen at torch's fetcher: the script imports nothing.

In the rank, ``install`` wraps torch's two dataset fetchers, the one object every DataLoader reads
a dataset through: in the main process (``num_workers=0``) and in every worker, forked or spawned,
persistent or not, whatever the sampler or batch sampler. A map-style fetch is recorded as the
indices the loader asked of its dataset (one record per batch); an iterable dataset's as how many
items it yielded into the batch, because which items they were is not observable from outside.
A worker started with ``spawn`` or ``forkserver`` never ran the bootstrap: torch starts it at
``torch.utils.data._utils.worker._worker_loop``, which is pointed here, so the worker installs the
same wrap before its loop starts and sends over the channel as a forked one does.

A script that indexes its own dataset without a DataLoader (a generator that batches by hand)
goes through no fetcher. ``install`` therefore also makes every ``Dataset`` subclass defined from
then on (the script's own, not torch's nor the kit's) record the reads made of it outside a fetch:
the outermost read only (a dataset reading another it wraps is one read), marked ``"d": 1``.
A class defined before the bootstrap ran, or one that is not a ``Dataset``, is not observed.

A dataset's identity (``ds``) is its class's qualified name and its length, ``TokenDataset[4096]``
(``[iterable]`` for an iterable one), and for a ``Subset`` where it begins in the dataset it
splits, ``Subset@4096[4096]``: stable across runs and attempts, and the same whatever the script
names its variables; two datasets of one class and one length are one identity, which a grader
tells apart by the indices each read (docs/run-dir.md, "Loader records").

In the parent, ``summarise`` turns the records into the run's sample accounting: per dataset, the
items each rank fetched, how many distinct, and how many more than one rank fetched.
"""

from __future__ import annotations

import functools
import os
import threading
import types
from collections import defaultdict
from pathlib import Path
from typing import Any

from harness import channel, rundir

_writer: list = []  # (pid, writer): each process of the rank (forked workers too) has its own
_reading = threading.local()  # .depth: reads in progress in this thread (a fetch, or a direct read)


def _write(rec: dict[str, Any]) -> None:
    from harness import instrument

    r = instrument.current()
    if not _writer or _writer[0][0] != os.getpid():
        if r is not None:
            w = channel.open_writer(r.dir / rundir.LOADS, r.key)
        elif channel.active():  # a spawned worker: the parent attributes and signs what it sends
            w = channel.open_writer(rundir.LOADS, "")
        else:  # unsandboxed and spawned: no key to sign with here (docs/run-dir.md)
            return
        _writer[:] = [(os.getpid(), w)]
    if r is not None:
        rec["a"], rec["s"] = r.attempt, r.step
    else:
        rec["a"] = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    if info is not None:
        rec["w"] = info.id
    _writer[0][1].write(rec)


def identity(dataset: Any, iterable: bool = False) -> str:
    name = type(dataset).__qualname__
    if iterable:
        return f"{name}[iterable]"
    start = _subset_start(dataset)
    if start is not None:  # splits of one dataset, told apart by where each begins in it
        name = f"{name}@{start}"
    try:
        return f"{name}[{len(dataset)}]"
    except Exception:  # a map-style dataset may have no length (its sampler knows the indices)
        return f"{name}[?]"


def _subset_start(dataset: Any) -> Any:
    """Where a ``torch.utils.data.Subset`` begins in the dataset it splits (its first index), or
    None for any other dataset: a train and a validation split of one length stay two datasets."""
    from torch.utils.data import Subset

    if not isinstance(dataset, Subset):
        return None
    try:
        return _index(dataset.indices[0]) if len(dataset.indices) else None
    except Exception:
        return None


def subset_start(ident: str) -> float:
    """Where a split begins in the dataset it splits (``Subset@4096[4096]`` -> 4096), or infinity
    for an identity that does not say (it sorts after every split)."""
    name = ident.rpartition("[")[0]
    start = name.rpartition("@")[2] if "@" in name else ""
    return float(start) if start.isdigit() else float("inf")


def size_of(ident: str) -> int | None:
    """The length an identity names (``Rows[4096]`` -> 4096); None for ``[?]`` and ``[iterable]``."""
    n = ident.rpartition("[")[2].removesuffix("]")
    return int(n) if ident.endswith("]") and n.isdigit() else None


def _index(i: Any) -> Any:
    if isinstance(i, bool) or not isinstance(i, int):
        try:
            return int(i)  # numpy and tensor indices
        except Exception:
            return str(i)[:64]  # a key of a dict-like dataset
    return i


def _wrap_map(fetch):
    def wrapped(self, possibly_batched_index):
        try:
            ident = self.__dict__.get("_tw_ds") or self.__dict__.setdefault("_tw_ds", identity(self.dataset))
            i = [_index(x) for x in possibly_batched_index] if self.auto_collation else _index(possibly_batched_index)
            _write({"ds": ident, "i": i})
        except Exception:  # never let the ledger break the script's data loading
            pass
        with _read_in_progress():  # the items the fetch asks of the dataset are this one read
            return fetch(self, possibly_batched_index)
    wrapped._tw_fetch = True  # type: ignore[attr-defined]
    return wrapped


def _wrap_iterable(fetch):
    def wrapped(self, possibly_batched_index):
        collate, counted = self.collate_fn, []

        def counting(data):
            counted.append(len(data) if self.auto_collation else 1)
            return collate(data)
        self.collate_fn = counting
        try:
            with _read_in_progress():  # an iterable over a map-style dataset: counted, not indexed
                return fetch(self, possibly_batched_index)
        finally:
            self.collate_fn = collate
            if counted:
                try:
                    _write({"ds": identity(self.dataset, iterable=True), "n": counted[0]})
                except Exception:
                    pass
    wrapped._tw_fetch = True  # type: ignore[attr-defined]
    return wrapped


class _read_in_progress:
    def __enter__(self) -> None:
        _reading.depth = getattr(_reading, "depth", 0) + 1

    def __exit__(self, *exc: object) -> None:
        _reading.depth -= 1


def _wrap_direct(get, batched: bool):
    """A script's own dataset read outside any fetch: recorded as the loader would record it."""
    @functools.wraps(get)
    def read(self, index):
        if getattr(_reading, "depth", 0):  # inside a fetch, or a read of a dataset wrapping this one
            return get(self, index)
        try:
            i = [_index(x) for x in index] if batched else _index(index)
            _write({"ds": identity(self), "i": i, "d": 1})
        except Exception:  # never let the ledger break the script's data loading
            pass
        with _read_in_progress():
            return get(self, index)
    read._tw_read = True  # type: ignore[attr-defined]
    return read


_SKIPPED = ("torch", "harness", "grader")  # datasets no submission wrote: torch's own, the kit's


def _observe(cls: type) -> None:
    from torch.utils.data import IterableDataset

    if cls.__module__.partition(".")[0] in _SKIPPED or issubclass(cls, IterableDataset):
        return
    for name, batched in (("__getitem__", False), ("__getitems__", True)):
        get = cls.__dict__.get(name)
        # a plain method only: a staticmethod or a callable object would not be handed ``self``
        if isinstance(get, types.FunctionType) and not getattr(get, "_tw_read", False):
            setattr(cls, name, _wrap_direct(get, batched))


def _observing_subclass_hook(dataset: Any) -> classmethod:
    """``Dataset.__init_subclass__``: each subclass created from now on is observed, after what
    the hook it replaces did (``Dataset``'s own where torch has one, else ``typing.Generic``'s)."""
    own = dataset.__dict__.get("__init_subclass__")

    def hook(cls: type, **kwargs: Any) -> None:
        if own is not None:
            own.__get__(None, cls)(**kwargs)
        else:
            super(dataset, cls).__init_subclass__(**kwargs)
        try:
            _observe(cls)
        except Exception:  # never let the ledger break the script's own classes
            pass
    hook._tw_hook = True  # type: ignore[attr-defined]
    return classmethod(hook)


def install() -> None:
    """Wrap torch's fetchers in this process (once), observe the datasets defined from now on, and
    start spawned loader workers here."""
    from torch.utils.data import Dataset
    from torch.utils.data._utils import fetch, worker

    if not getattr(Dataset.__init_subclass__, "_tw_hook", False):
        Dataset.__init_subclass__ = _observing_subclass_hook(Dataset)  # type: ignore[method-assign, assignment]
    if not getattr(fetch._MapDatasetFetcher.fetch, "_tw_fetch", False):
        fetch._MapDatasetFetcher.fetch = _wrap_map(fetch._MapDatasetFetcher.fetch)  # type: ignore[method-assign]
        fetch._IterableDatasetFetcher.fetch = _wrap_iterable(  # type: ignore[method-assign]
            fetch._IterableDatasetFetcher.fetch)
    if worker._worker_loop is not _worker_loop:
        _original[:] = [worker._worker_loop]
        worker._worker_loop = _worker_loop


_original: list = []


def _worker_loop(*args, **kwargs):
    """A loader worker's entry: pickled by reference, so a spawned worker imports this module and
    wraps its own fetchers before torch's loop makes its fetcher. A forked one has them already."""
    install()
    return _original[0](*args, **kwargs)


# -- the parent: the run's sample accounting ---------------------------------------------------------
def without_probes(loads: dict[int, list[dict[str, Any]]]) -> dict[int, list[dict[str, Any]]]:
    """Each rank's records without the direct reads (``"d"``) of a dataset some DataLoader fetched: a
    script that trains through a loader and also indexes the dataset itself (``train_set[0]`` for the
    input's shape, a sample to log) did not train on those items. A dataset no loader fetched keeps its
    direct reads (a generator batching by hand). The one reading of the schema's ``"d"``: the run's
    summary and the grader's ledger both use it."""
    fetched = {x.get("ds") for recs in loads.values() for x in recs if not x.get("d")}
    return {r: [x for x in recs if not (x.get("d") and x.get("ds") in fetched)] for r, recs in loads.items()}


def summarise(run_dir: Path, key: str | None) -> list[dict[str, Any]]:
    """Per dataset, over each rank's latest attempt, what was trained on (``without_probes``): ``{"dataset", "kind", "ranks": {rank: {"items",
    "distinct"}}, "distinct", "shared"}`` (``shared``: indices fetched by more than one rank; map-style
    only: an iterable dataset's ``distinct`` and ``shared`` are None, not observable)."""
    per: dict[str, dict[int, list[Any]]] = defaultdict(dict)
    counts: dict[str, dict[int, int]] = defaultdict(dict)
    latest: dict[int, list[dict[str, Any]]] = {}
    for r in rundir.ranks_in(run_dir):
        recs = rundir.read_records(rundir.rank_dir(run_dir, r) / rundir.LOADS, key).valid
        if recs:
            last = max(int(x.get("a", 0)) for x in recs)
            latest[r] = [x for x in recs if int(x.get("a", 0)) == last]
    for r, recs in without_probes(latest).items():
        for x in recs:
            if not isinstance(x.get("ds"), str):
                continue
            if "i" in x:
                got = x["i"] if isinstance(x["i"], list) else [x["i"]]
                per[x["ds"]].setdefault(r, []).extend(got)
            elif isinstance(x.get("n"), int):
                counts[x["ds"]][r] = counts[x["ds"]].get(r, 0) + x["n"]
    out: list[dict[str, Any]] = []
    for ds, by_rank in sorted(per.items()):
        sets = {r: set(map(_hashable, v)) for r, v in by_rank.items()}
        seen: dict[Any, int] = defaultdict(int)
        for s in sets.values():
            for i in s:
                seen[i] += 1
        out.append({"dataset": ds, "kind": "map",
                    "ranks": {r: {"items": len(v), "distinct": len(sets[r])} for r, v in sorted(by_rank.items())},
                    "distinct": len(seen), "shared": sum(1 for c in seen.values() if c > 1)})
    for ds, n_by_rank in sorted(counts.items()):
        out.append({"dataset": ds, "kind": "iterable",
                    "ranks": {r: {"items": n, "distinct": None} for r, n in sorted(n_by_rank.items())},
                    "distinct": None, "shared": None})
    return out


def _hashable(i: Any) -> Any:
    return tuple(i) if isinstance(i, list) else i
