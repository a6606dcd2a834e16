"""RunEvidence.adopt_loader_ledger: a run that brought its own data is judged on what its
DataLoaders fetched, named by length after the manifest's datasets; a run that read the kit's
datasets keeps the kit's ledger alone."""
from __future__ import annotations

from grader.checks import workload_intact
from grader.evidence import load_run
from tests.grader.rundirs import RunDirBuilder

SIZES = {"train": 8, "val": 4}


def _run(tmp_path, kit: bool = False):
    b = RunDirBuilder(tmp_path / "r")
    for r in (0, 1):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        b.load(r, "Rows[8]", [r * 4 + k for k in range(4)], step=0)
        b.load(r, "Rows[4]", [0, 1, 2, 3] if r == 0 else [], step=4)  # rank 0 scores the split alone
        b.load(r, "Rows[8]", r, step=4)  # one more read, unbatched
        b.load(r, "Noise[8]", [0, 1], step=4)  # another dataset of the same length, fetched less
        if kit:
            b.sample(r, r, "train")
    return load_run("main", b.build())


def test_loader_fetches_stand_for_the_ledger_under_the_manifest_names(tmp_path):
    ev = _run(tmp_path)
    assert ev.adopt_loader_ledger(SIZES) == {"train": "Rows[8]", "val": "Rows[4]"}
    assert ev.samples(0, "train") == [0, 1, 2, 3, 0] and ev.samples(1, "train") == [4, 5, 6, 7, 1]
    assert ev.samples(0, "val") == [0, 1, 2, 3] and ev.samples(1, "val") == []
    assert all(x["s"] in (0, 4) and x["ds"] in ("train", "val") for x in ev.ledgers[0])  # steps kept
    assert ev.adopt_loader_ledger(SIZES) == {"train": "Rows[8]", "val": "Rows[4]"}  # once only
    assert len(ev.samples(0, "train")) == 5
    assert workload_intact._via(ev) == "its DataLoaders"  # what the check's messages say the reads went through


def test_a_run_that_read_the_kit_s_datasets_keeps_the_kit_s_ledger(tmp_path):
    ev = _run(tmp_path, kit=True)
    assert ev.adopt_loader_ledger(SIZES) == {}
    assert ev.samples(0, "train") == [0] and ev.samples(0, "val") == []
    assert workload_intact._via(ev) == "the kit's datasets"


def test_no_loader_dataset_of_the_length_adopts_nothing(tmp_path):
    ev = _run(tmp_path)
    assert ev.adopt_loader_ledger({"train": 16}) == {} and ev.samples(0, "train") == []


def test_forged_loader_lines_are_counted_and_never_adopted(tmp_path):
    ev = _run(tmp_path)
    path = ev.run_dir / "ranks" / "0" / "loads.jsonl"
    path.write_text(path.read_text() + '{"a": 0, "ds": "Rows[8]", "i": [9, 9, 9], "s": 0}\n')
    ev = load_run("main", ev.run_dir)
    assert ev.forged == 1
    ev.adopt_loader_ledger(SIZES)
    assert 9 not in ev.samples(0, "train")


def test_a_workload_names_the_lengths_to_adopt(tmp_path):
    # the grader's judge and the bundle's self-check both adopt through the manifest's workload
    from types import SimpleNamespace

    wl = SimpleNamespace(dataset="train", dataset_size=8, evaluations={"val": SimpleNamespace(samples=4, dataset_size=None)})
    assert _run(tmp_path).adopt_for(wl) == {"train": "Rows[8]", "val": "Rows[4]"}


def test_the_bundle_self_check_adopts_as_the_grader_does():
    # the self-check ships in the candidate's bundle; a script with its own data failed workload_intact there
    import ast
    from pathlib import Path

    src = (Path(__file__).resolve().parents[3] / "grader" / "bundle" / "kit" / "selfcheck.py").read_text()
    judge_all = next(f for f in ast.walk(ast.parse(src)) if isinstance(f, ast.FunctionDef) and f.name == "judge_all")
    assert "adopt_for" in {n.attr for n in ast.walk(judge_all) if isinstance(n, ast.Attribute)}


def test_splits_of_one_length_are_named_in_the_order_they_are_first_read(tmp_path):
    # memory-leak's shape: train and val are Subsets of one dataset, 8 samples each, and the
    # evaluations read val far more often than the steps read train
    b = RunDirBuilder(tmp_path / "r")
    for r in (0, 1):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        b.load(r, "Subset@0[8]", [r * 4 + k for k in range(4)], step=0)
        for step in (2, 4, 6):
            b.load(r, "Subset@8[8]", [r * 4 + k for k in range(4)], step=step)
    ev = load_run("main", b.build())
    assert ev.adopt_loader_ledger({"train": 8, "val": 8}) == {"train": "Subset@0[8]", "val": "Subset@8[8]"}
    assert ev.samples(0, "train") == [0, 1, 2, 3] and len(ev.samples(0, "val")) == 12


def test_splits_read_before_training_still_take_their_place_in_the_dataset(tmp_path):
    # loader workers prefetch the evaluation split before the first training fetch
    b = RunDirBuilder(tmp_path / "r")
    for r in (0, 1):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        b.load(r, "Subset@8[8]", [0, 1], step=0)
        b.load(r, "Subset@0[8]", [r * 4 + k for k in range(4)], step=0)
    ev = load_run("main", b.build())
    assert ev.adopt_loader_ledger({"train": 8, "val": 8}) == {"train": "Subset@0[8]", "val": "Subset@8[8]"}


def test_an_evaluation_that_reads_part_of_its_split_is_found_by_the_split_s_length(tmp_path):
    from types import SimpleNamespace

    ev = _run(tmp_path)  # val: Rows[4], of which each evaluation reads 2
    wl = SimpleNamespace(dataset="train", dataset_size=8,
                         evaluations={"val": SimpleNamespace(samples=2, dataset_size=4)})
    assert ev.adopt_for(wl) == {"train": "Rows[8]", "val": "Rows[4]"}


def test_direct_reads_count_only_for_a_dataset_no_loader_fetched(tmp_path):
    # a script that indexes its dataset itself (harness.fetches marks those reads "d"): where a
    # DataLoader feeds training, a probe for the input's shape is no sample trained on; where no
    # loader reads the dataset, the direct reads are the training reads (a generator batching by hand)
    b = RunDirBuilder(tmp_path / "r")
    for r in (0, 1):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        b.load(r, "Rows[8]", 0, step=0, d=1)  # train_set[0], on every rank, before the loop
        b.load(r, "Rows[8]", [r * 4 + k for k in range(4)], step=0)
        for k in range(2):
            b.load(r, "Rows[4]", r * 2 + k, step=1, d=1)  # val, read by hand only
    ev = load_run("main", b.build())
    assert ev.adopt_loader_ledger(SIZES) == {"train": "Rows[8]", "val": "Rows[4]"}
    assert ev.samples(0, "train") == [0, 1, 2, 3] and ev.samples(1, "train") == [4, 5, 6, 7]
    assert ev.samples(0, "val") == [0, 1] and ev.samples(1, "val") == [2, 3]


def test_every_dataset_the_loaders_fetched_is_counted_adopted_or_not(tmp_path):
    ev = _run(tmp_path)
    assert ev.loader_datasets() == {"Rows[8]": 10, "Rows[4]": 4, "Noise[8]": 4}
    assert workload_intact._other_datasets(ev, 16) == (" (no DataLoader read a dataset of 16 samples; they read "
                                                       "Rows[8] (10 samples), Rows[4] (4 samples), Noise[8] (4 samples))")
