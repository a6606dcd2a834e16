"""harness.fetches: what a DataLoader fetched, recorded at torch's fetcher for any dataset, and the
run's sample accounting read back from the signed records."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler, Subset
from torch.utils.data._utils import fetch, worker

from grader.console import sample_lines
from harness import fetches, rundir


class Rows(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return torch.tensor([float(i)])


class Batched(Rows):
    def __getitems__(self, indices):  # torch calls it with the whole batch when a dataset has it
        return [self[i] for i in indices]


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(7.0).unsqueeze(1))


@pytest.fixture
def seen(monkeypatch):
    """install() in this process, undone afterwards; what it would write, in a list."""
    got: list[dict] = []
    hook = Dataset.__dict__.get("__init_subclass__")
    if hook is None:  # torch's Dataset has none of its own: Generic's runs; undone by deleting ours
        monkeypatch.setattr(Dataset, "__init_subclass__", Dataset.__init_subclass__, raising=False)
        monkeypatch.delattr(Dataset, "__init_subclass__")
    else:
        monkeypatch.setattr(Dataset, "__init_subclass__", hook)
    for cls in (fetch._MapDatasetFetcher, fetch._IterableDatasetFetcher):
        monkeypatch.setattr(cls, "fetch", cls.fetch)
    monkeypatch.setattr(worker, "_worker_loop", worker._worker_loop)
    monkeypatch.setattr(fetches, "_write", got.append)
    fetches.install()
    fetches.install()  # a second install wraps nothing twice
    return got


def test_map_style_batches_are_recorded_as_the_indices_asked_for(seen):
    assert [x for b in DataLoader(Rows(), batch_size=4) for x in b.flatten().tolist()] == list(range(10))
    assert seen == [{"ds": "Rows[10]", "i": [0, 1, 2, 3]}, {"ds": "Rows[10]", "i": [4, 5, 6, 7]},
                    {"ds": "Rows[10]", "i": [8, 9]}]


def test_any_sampler_getitems_and_unbatched_loading_are_recorded(seen):
    list(DataLoader(Batched(), batch_sampler=BatchSampler(SequentialSampler(range(5)), 2, drop_last=True)))
    list(DataLoader(Rows(), batch_size=None, sampler=[3, 1]))  # no auto-collation: one index per fetch
    list(DataLoader(Subset(Rows(), [9, 8, 7]), batch_size=3))  # indices are the loader's dataset's own
    assert seen == [{"ds": "Batched[10]", "i": [0, 1]}, {"ds": "Batched[10]", "i": [2, 3]},
                    {"ds": "Rows[10]", "i": 3}, {"ds": "Rows[10]", "i": 1}, {"ds": "Subset@9[3]", "i": [0, 1, 2]}]


def test_an_iterable_dataset_is_counted_by_what_it_yielded_into_batches(seen):
    assert len(list(DataLoader(Stream(), batch_size=3))) == 3  # 3 + 3 + the last 1
    assert len(list(DataLoader(Stream(), batch_size=3, drop_last=True))) == 2
    assert seen == [{"ds": "Stream[iterable]", "n": n} for n in (3, 3, 1, 3, 3)]


def test_the_ledger_never_breaks_loading(monkeypatch, seen):
    def broken(rec):
        raise OSError("channel gone")
    monkeypatch.setattr(fetches, "_write", broken)
    assert len(list(DataLoader(Rows(), batch_size=5))) == 2
    assert len(list(DataLoader(Stream(), batch_size=5))) == 2


def test_a_dataset_the_script_indexes_itself_is_recorded_at_its_outermost_read(seen):
    class Own(Dataset):  # defined after install(), as a script's own classes are
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return torch.tensor([float(i)])

    class Doubled(Dataset):
        def __init__(self, base):
            self.base = base

        def __len__(self):
            return len(self.base)

        def __getitem__(self, i):
            return self.base[i] * 2  # reads the dataset it wraps: one read, not two

    own = Own()
    items = [own[1], Doubled(own)[2], own[torch.tensor(3)]]
    assert [x.item() for x in items] == [1.0, 4.0, 3.0]
    assert _local(seen) == [{"ds": "Own[6]", "i": 1, "d": 1}, {"ds": "Doubled[6]", "i": 2, "d": 1},
                            {"ds": "Own[6]", "i": 3, "d": 1}]
    seen.clear()
    list(DataLoader(Doubled(own), batch_size=3))  # through a loader: the fetch alone, as before
    assert _local(seen) == [{"ds": "Doubled[6]", "i": [0, 1, 2]}, {"ds": "Doubled[6]", "i": [3, 4, 5]}]


def _local(recs: list[dict]) -> list[dict]:
    """The records with a test's local class named as a script's module-level class is."""
    return [{**r, "ds": r["ds"].rpartition("<locals>.")[2]} for r in recs]


def test_only_datasets_a_submission_defines_are_observed(seen):
    torch_own = torch.utils.data.TensorDataset(torch.zeros(4, 1))
    kit = type("KitRows", (Dataset,), {"__module__": "harness.workloads", "__len__": lambda self: 2,
                                       "__getitem__": lambda self, i: i})
    assert kit()[1] == 1 and torch_own[0][0].item() == 0.0
    assert Rows()[2].item() == 2.0  # a class made before install(): torch's own Subset, say
    assert seen == []

    class Typed(Dataset[int]):  # a generic subclass keeps what typing.Generic's hook gives it
        def __getitem__(self, i):
            return i

    assert Typed()[5] == 5 and _local(seen) == [{"ds": "Typed[?]", "i": 5, "d": 1}]

    class Static(Dataset):  # a staticmethod is handed no self: left as it is
        __getitem__ = staticmethod(lambda i: i * 2)

    assert Static()[3] == 6 and len(seen) == 1


def test_a_broken_ledger_never_breaks_a_direct_read(monkeypatch, seen):
    class Own(Dataset):
        def __getitem__(self, i):
            return i

    def broken(rec):
        raise OSError("channel gone")
    monkeypatch.setattr(fetches, "_write", broken)
    assert [Own()[i] for i in range(3)] == [0, 1, 2]


def test_spawned_workers_start_through_the_kit_entry(seen):
    """torch starts a loader worker at ``_utils.worker._worker_loop``, looked up when the worker is
    made: a spawned worker unpickles it by name, which must be this module's."""
    assert worker._worker_loop is fetches._worker_loop
    assert (fetches._worker_loop.__module__, fetches._worker_loop.__qualname__) == ("harness.fetches", "_worker_loop")


def _ledger(run_dir: Path, rank: int, key: str, recs: list[dict]) -> None:
    w = rundir.RecordWriter(rundir.rank_dir(run_dir, rank) / rundir.LOADS, key)
    for r in recs:
        w.write(r)
    w.close()


def test_summary_counts_each_dataset_per_rank_over_the_latest_attempt(tmp_path):
    key = "k" * 32
    _ledger(tmp_path, 0, key, [{"a": 0, "ds": "Rows[8]", "i": [0, 1, 2, 3, 4, 5, 6, 7]},  # before a restart
                               {"a": 1, "ds": "Rows[8]", "i": [0, 1]}, {"a": 1, "ds": "Rows[8]", "i": [2, 3]},
                               {"a": 1, "ds": "Stream[iterable]", "n": 3}])
    _ledger(tmp_path, 1, key, [{"a": 1, "ds": "Rows[8]", "i": [3, 4, 5]}, {"a": 1, "ds": "Rows[8]", "i": 5}])
    (rundir.rank_dir(tmp_path, 1) / rundir.LOADS).open("a").write('{"a": 1, "ds": "Rows[8]", "i": [6, 7]}\n')
    got = fetches.summarise(tmp_path, key)
    assert got == [
        {"dataset": "Rows[8]", "kind": "map", "ranks": {0: {"items": 4, "distinct": 4}, 1: {"items": 4, "distinct": 3}},
         "distinct": 6, "shared": 1},  # the forged line is not counted
        {"dataset": "Stream[iterable]", "kind": "iterable", "ranks": {0: {"items": 3, "distinct": None}},
         "distinct": None, "shared": None},
    ]
    lines = sample_lines(got)
    assert lines[1:3] == ["  Rows[8]: rank 0 4, rank 1 4", "    6 distinct of 8; 1 fetched by more than one rank over the run"]
    assert "not observable" in lines[4] and all(len(x) <= 80 for x in lines + sample_lines([], stepped=True))
    assert sample_lines([]) == [] and fetches.summarise(tmp_path / "none", key) == []
    assert "not observed" in " ".join(sample_lines([], stepped=True))
    assert [fetches.size_of(x) for x in ("Rows[8]", "Rows[?]", "Stream[iterable]", "Odd")] == [8, None, None, None]


def test_summary_leaves_out_a_probe_of_a_dataset_a_loader_fetched_as_the_grader_does(tmp_path):
    # train_set[0] read by hand for the model's widths beside a DataLoader is no sample trained on; a
    # dataset only ever read by hand (a generator batching it) is what the rank trained on
    key = "k" * 32
    _ledger(tmp_path, 0, key, [{"a": 0, "ds": "Rows[8]", "i": 0, "d": 1}, {"a": 0, "ds": "Rows[8]", "i": [0, 2]},
                               {"a": 0, "ds": "Held[4]", "i": 1, "d": 1}, {"a": 0, "ds": "Held[4]", "i": 3, "d": 1}])
    _ledger(tmp_path, 1, key, [{"a": 0, "ds": "Rows[8]", "i": 0, "d": 1}, {"a": 0, "ds": "Rows[8]", "i": [1, 3]}])
    got = {x["dataset"]: x for x in fetches.summarise(tmp_path, key)}
    assert got["Rows[8]"]["shared"] == 0 and got["Rows[8]"]["ranks"][0]["items"] == 2
    assert got["Held[4]"]["ranks"] == {0: {"items": 2, "distinct": 2}}
    loads = {r: rundir.read_records(rundir.rank_dir(tmp_path, r) / rundir.LOADS, key).valid for r in (0, 1)}
    assert [len(v) for v in fetches.without_probes(loads).values()] == [3, 1]
