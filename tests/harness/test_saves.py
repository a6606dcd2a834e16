"""The checkpoint-write trace: recorded from outside the script on a real run, and replayed into
per-file histories (what was complete on disk, when, written by whom)."""

from __future__ import annotations

import pytest

from grader.evidence.saves import file_history, file_ops
from harness import rundir
from harness.launch import Fault, LaunchConfig, launch
from harness.observe import observe_rank
from tests.conftest import FIXTURES, assert_nothing_left


def rec(seq, ph, op="save", path=None, src=None, step=0, t=0.0, main=True, a=0, **kw):
    r = {"a": a, "seq": seq, "ph": ph, "op": op, "step": step, "t": t, "main": main, **kw}
    if ph == "begin":
        r["path"] = path
        if src:
            r["src"] = src
    return r


ATOMIC = [rec(1, "begin", path="/w/c.tmp", step=3, t=1.0), rec(1, "end", t=2.0, bytes=10),
          rec(2, "begin", op="rename", path="/w/c.pt", src="/w/c.tmp", step=3, t=2.1),
          rec(2, "end", op="rename", t=2.2)]
DIRECT_TORN = [rec(1, "begin", path="/w/c.pt", step=5, t=1.0)]
FAILED = [rec(1, "begin", path="/w/c.pt", step=5, t=1.0), rec(1, "error", t=1.5, err="OSError: disk full")]
COPY = ATOMIC + [rec(3, "begin", op="copy", path="/art/c-3.pt", src="/w/c.pt", step=4, t=3.0),
                 rec(3, "end", op="copy", t=3.5)]


@pytest.mark.parametrize("records, path, versions, torn, step", [
    (ATOMIC, "/w/c.pt", [2.2], 0, 3),          # published by the rename, with the write's step
    (ATOMIC, "/w/c.tmp", [2.0], 0, 3),
    (DIRECT_TORN, "/w/c.pt", [], 1, None),     # the writer died mid-write: never complete
    (FAILED, "/w/c.pt", [], 0, None),          # an error is not a version, nor a kill
    (COPY, "/art/c-3.pt", [3.5], 0, 3),        # a copy holds what its source held (step 3, not 4)
])
def test_file_history(records, path, versions, torn, step):
    h = file_history(file_ops({0: records})).get(path)
    if not versions and not torn:
        assert h is None or not h.versions
        return
    assert [t for t, _ in h.versions] == versions
    assert len(h.torn) == torn
    if step is not None:
        assert h.versions[-1][1].step == step


def test_two_ranks_writing_one_path_are_both_writers():
    recs = {r: [rec(1, "begin", path="/w/same.pt", t=float(r)), rec(1, "end", t=r + 0.5)] for r in (0, 1)}
    assert file_history(file_ops(recs))["/w/same.pt"].writers == {0, 1}


def test_ranks_racing_through_one_tmp_name_are_all_writers_of_what_it_publishes():
    """Both ranks save c.tmp, rank 0's rename takes it, rank 1's finds it gone: c.pt holds one
    rank's bytes, but both wrote it (which one's it holds is the race)."""
    recs = {r: [rec(1, "begin", path="/w/c.tmp", t=1.0 + r / 10), rec(1, "end", t=2.0 + r / 10, bytes=10),
                rec(2, "begin", op="rename", path="/w/c.pt", src="/w/c.tmp", t=2.5 + r / 10),
                rec(2, "error" if r else "end", op="rename", t=2.6 + r / 10,
                    **({"err": "FileNotFoundError"} if r else {}))] for r in (0, 1)}
    hist = file_history(file_ops(recs))
    assert hist["/w/c.pt"].writers == {0, 1} and len(hist["/w/c.pt"].versions) == 1
    # one rank alone through the same name, then the other through its own: one writer each
    alone = {0: ATOMIC, 1: [dict(r, path=r["path"].replace("/w/c", "/w/d")) if "path" in r else r for r in ATOMIC]}
    alone[1] = [dict(r, src="/w/d.tmp") if "src" in r else r for r in alone[1]]
    hist = file_history(file_ops(alone))
    assert hist["/w/c.pt"].writers == {0} and hist["/w/d.pt"].writers == {1}


@pytest.mark.slow
def test_a_real_run_is_traced_from_outside(tmp_path):
    res = launch(LaunchConfig(script=FIXTURES / "saves.py", run_dir=tmp_path / "run", cwd=tmp_path))
    assert_nothing_left(tmp_path / "run")
    assert res.status == "ok"
    key = rundir.load_run(res.run_dir)["key"]
    ops = file_ops({r: rundir.read_records(rundir.rank_dir(res.run_dir, r) / rundir.SAVES, key).valid
                    for r in (0, 1)})
    hist = file_history(ops)
    ckpt = hist[str(tmp_path / "ckpt.pt")]
    assert [v.step for _, v in ckpt.versions] == [1, 2, 3, 4] and ckpt.writers == {0}
    assert all(v.main for _, v in ckpt.versions)
    assert hist[str(tmp_path / "artifacts" / "ckpt-4.pt")].versions[0][1].path == str(tmp_path / "ckpt.pt.tmp")
    assert hist[str(tmp_path / "shared.pt")].writers == {0, 1}
    background = hist[str(tmp_path / "background.pt")].versions[0][1]
    assert background.rank == 1 and not background.main
    assert not any(str(res.run_dir) in (o.path or "") for o in ops)  # the harness's own files


@pytest.mark.slow
@pytest.mark.parametrize("script", ["torn_save.py", "torn_save_file.py"])  # a path, an open file
def test_a_save_torn_by_a_fault_has_no_end(tmp_path, script):
    res = launch(LaunchConfig(script=FIXTURES / script, run_dir=tmp_path / "run", cwd=tmp_path,
                              faults=[Fault(rank=0, step=3, when="save")]))
    assert_nothing_left(tmp_path / "run")
    key = rundir.load_run(res.run_dir)["key"]
    ops = file_ops({0: rundir.read_records(rundir.rank_dir(res.run_dir, 0) / rundir.SAVES, key).valid})
    h = file_history(ops)[str(tmp_path / "ckpt.pt")]
    assert [v.step for _, v in h.versions] == [1, 2] and [o.step for o in h.torn] == [3]


def test_fingerprints_are_the_per_parameter_terms_of_the_step_fingerprint():
    import torch

    from harness.instrument import fingerprint
    from harness.saves import tensor_fingerprints

    m = torch.nn.Linear(30, 2)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    fps = tensor_fingerprints({"model": m.state_dict(), "step": 3, "ids": torch.arange(4),
                               "optimizer": {"state": {0: {"exp_avg": torch.ones(20)}}}})
    assert set(fps) == {"model.weight", "model.bias", "optimizer.state.0.exp_avg"}  # floating tensors only
    assert fps["model.weight"] + fps["model.bias"] == fingerprint(opt)
    assert fps["optimizer.state.0.exp_avg"] == 8.0  # the first 8 elements


@pytest.mark.parametrize("mutate, changed", [(False, False), (True, True)])
def test_a_state_that_moves_on_while_it_is_written_is_marked(tmp_path, mutate, changed):
    import torch

    from harness.saves import SaveTrace

    key = "k" * 32
    w = torch.zeros(10)
    trace = SaveTrace(tmp_path, 0, key, 0, lambda: 5)
    trace.timed("save", (lambda: w.add_(1)) if mutate else (lambda: None), str(tmp_path / "c.pt"),
                obj={"model": {"w": w}, "step": 5}, fingerprints=True)
    op = file_ops({0: rundir.read_records(rundir.rank_dir(tmp_path, 0) / rundir.SAVES, key).valid})[0]
    assert op.fp == {"model.w": 0.0} and op.keys == ["model", "step"] and op.step == 5
    assert op.fp_changed is changed


def test_loads_are_traced_apart_from_writes():
    recs = ATOMIC + [rec(3, "begin", op="load", path="/w/c.pt", t=5.0, a=1), rec(3, "end", op="load", t=5.1, a=1),
                     rec(4, "begin", op="load", path="/w/gone.pt", t=6.0, a=1),
                     rec(4, "error", op="load", t=6.1, a=1, err="FileNotFoundError")]
    assert [o.op for o in file_ops({0: recs})] == ["save", "rename"]  # what checks of writes always saw
    loads = file_ops({0: recs}, kinds=("load",))
    assert [(o.path, o.attempt, o.completed) for o in loads] == [("/w/c.pt", 1, True), ("/w/gone.pt", 1, False)]
    assert [t for t, _ in file_history(file_ops({0: recs}))["/w/c.pt"].versions] == [2.2]  # a read is no version


@pytest.mark.slow
def test_a_save_fault_never_tears_the_harness_own_files(tmp_path):
    # ddp_ok.py saves nothing: the only torch.save after step 3 is the bootstrap's final_params.safetensors
    res = launch(LaunchConfig(script=FIXTURES / "ddp_ok.py", run_dir=tmp_path / "run", cwd=tmp_path,
                              faults=[Fault(rank=r, step=3, when="save") for r in (0, 1)]))
    assert_nothing_left(tmp_path / "run")
    assert res.status == "ok" and all(r["exit_code"] == 0 for r in res.to_json()["ranks"])
    key = rundir.load_run(res.run_dir)["key"]
    assert all(observe_rank(res.run_dir, r, key).params_sha256 for r in (0, 1))


def test_the_path_of_a_file_object_torch_save_was_handed(tmp_path):
    """A checkpoint written through os.fdopen(tempfile.mkstemp()) (the file object's name is its
    fd) is traced under its real path, so its rename publishes a checkpoint the trace saw written."""
    import io
    import os
    import tempfile

    from harness.saves import _path_of

    fd, tmp = tempfile.mkstemp(dir=tmp_path, prefix=".", suffix=".partial")
    with os.fdopen(fd, "wb") as f:
        assert _path_of(f) == os.path.realpath(tmp)
    with open(tmp_path / "named.pt", "wb") as f:
        assert _path_of(f) == str(tmp_path / "named.pt")
    assert _path_of(io.BytesIO()) is None
    assert _path_of(tmp_path / "x.pt") == str(tmp_path / "x.pt")
