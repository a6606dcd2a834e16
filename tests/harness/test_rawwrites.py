"""Binary files a rank writes with open(): traced, torn by the save fault, and a writer process the
script forked dies with its rank."""

from __future__ import annotations

import builtins
import io
import os
import pathlib

import pytest

from grader.evidence.saves import file_history, file_ops
from harness import rawwrites, rundir
from harness.launch import Fault, LaunchConfig, launch
from tests.conftest import FIXTURES, assert_nothing_left


class FakeTrace:
    def __init__(self):
        self.calls: list[tuple] = []

    def begin(self, op, path):
        self.calls.append(("begin", op, path))
        return len(self.calls)

    def end(self, seq, op, t0, path):
        self.calls.append(("end", op, path))


@pytest.fixture
def traced(tmp_path, monkeypatch):
    """``open`` wrapped for a working directory ``tmp_path/work``, restored afterwards."""
    monkeypatch.setattr(builtins, "open", builtins.open)
    monkeypatch.setattr(io, "open", io.open)
    work = tmp_path / "work"
    work.mkdir()
    trace = FakeTrace()
    rawwrites.install(trace, lambda p: p is not None, str(work), lambda: None)
    return trace, work


def test_a_binary_file_written_in_the_working_directory_is_one_operation(traced):
    trace, work = traced
    with open(work / "c.tmp", "wb") as f:
        f.write(b"abc")
        f.write(b"def")
    p = str(work / "c.tmp")
    assert trace.calls == [("begin", "bytes", p), ("end", "bytes", p)]
    assert (work / "c.tmp").read_bytes() == b"abcdef"


@pytest.mark.parametrize("how", ["text", "outside", "read", "inside", "unwritten"])
def test_what_is_not_traced(traced, tmp_path, how):
    trace, work = traced
    if how == "text":  # logs and metrics
        with open(work / "log.txt", "w") as f:
            f.write("step 1\n")
    elif how == "outside":
        with open(tmp_path / "elsewhere.bin", "wb") as f:
            f.write(b"x")
    elif how == "read":
        (work / "r.bin").write_bytes(b"x")  # traced, then read: only the read is this case's
        trace.calls.clear()
        with open(work / "r.bin", "rb") as f:
            f.read()
    elif how == "inside":  # a traced torch.save opens its own file
        with rawwrites.inside(), open(work / "c.pt", "wb") as f:
            f.write(b"x")
    else:
        open(work / "empty.bin", "wb").close()
    assert trace.calls == []


def test_pathlib_writes_are_traced_and_the_file_behaves_as_a_file(traced):
    trace, work = traced
    pathlib.Path(work / "a.bin").write_bytes(b"12345")
    f = open(work / "b.bin", "wb")
    f.writelines([b"1", b"2"])
    assert f.name == str(work / "b.bin") and not f.closed and f.tell() == 2
    del f  # closed (and the operation ended) when it is collected
    assert [c[0] for c in trace.calls] == ["begin", "end", "begin", "end"]


def test_a_bytes_write_renamed_into_place_publishes_a_version():
    def r(seq, ph, op, t, **kw):
        return {"a": 0, "seq": seq, "ph": ph, "op": op, "step": 4, "t": t, "main": True, **kw}

    recs = [r(1, "begin", "bytes", 1.0, path="/w/c.tmp"), r(1, "end", "bytes", 1.5),
            r(2, "begin", "rename", 1.6, path="/w/c.pt", src="/w/c.tmp"), r(2, "end", "rename", 1.7)]
    h = file_history(file_ops({0: recs}))
    assert [(t, o.op, o.step) for t, o in h["/w/c.pt"].versions] == [(1.7, "bytes", 4)]
    torn = file_history(file_ops({0: recs[:1]}))["/w/c.tmp"]
    assert torn.versions == [] and len(torn.torn) == 1


def _torn_run(tmp_path, script: str):
    """``script`` launched with its first checkpoint write at or after step 3 torn; it must fail."""
    res = launch(LaunchConfig(script=FIXTURES / script, run_dir=tmp_path / "run", cwd=tmp_path,
                              faults=[Fault(rank=0, step=3, when="save")]))
    assert_nothing_left(tmp_path / "run")
    assert res.status == "failed"
    return res


def _ops(res, rank=0):
    key = rundir.load_run(res.run_dir)["key"]
    return file_ops({rank: rundir.read_records(rundir.rank_dir(res.run_dir, rank) / rundir.SAVES, key).valid})


@pytest.mark.slow
def test_a_checkpoint_written_as_bytes_is_traced_and_torn(tmp_path):
    res = _torn_run(tmp_path, "bytes_save.py")
    h = file_history(_ops(res))
    assert [o.step for _, o in h[str(tmp_path / "ckpt.pt")].versions] == [1, 2]
    assert [o.step for o in h[str(tmp_path / "ckpt.pt.tmp")].torn] == [3]
    assert str(tmp_path / "log.txt") not in h  # text: not traced
    data = (tmp_path / "ckpt.pt.tmp").read_bytes()
    assert 0 < len(data) < os.path.getsize(tmp_path / "ckpt.pt")  # half of it reached the disk


@pytest.mark.slow
def test_a_forked_writer_torn_by_the_fault_takes_its_rank_down(tmp_path):
    res = _torn_run(tmp_path, "fork_save.py")
    rank0 = next(r for r in res.to_json()["ranks"] if r["rank"] == 0)
    assert rank0["exit_code"] == -9  # the rank itself, not only its writer
    torn = [o for o in _ops(res) if o.t_end is None]
    assert [(o.step, o.main) for o in torn] == [(4, True)]  # the forked writer's save at step 4
