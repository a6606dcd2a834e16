"""The collective trace's C++ kernel (harness/native/c10d_trace.cpp, harness.native_trace): its build,
its records turned into the trace's, and, launched, the same trace the Python kernel writes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from harness import collectives, native_build, native_trace, rundir
from tests.conftest import FIXTURES
from tests.harness.test_cli import tw


def test_a_failed_build_leaves_nothing_to_load(tmp_path, monkeypatch):
    monkeypatch.setattr(native_build, "BUILD_DIR", tmp_path)
    monkeypatch.setenv("CXX", "false")  # a compiler that fails
    with pytest.raises(RuntimeError, match="failed"):
        native_build.build()
    assert list(tmp_path.iterdir()) == []
    mod, why = native_build.load()
    assert mod is None and "python -m harness.native_build" in why


def test_the_python_kernel_is_taken_when_asked_for(monkeypatch):
    monkeypatch.setenv(native_build.TRACE_ENV, "python")
    assert native_build.load() == (None, f"{native_build.TRACE_ENV}=python")


def test_a_build_is_there_where_a_compiler_is():
    """make setup builds it; where a compiler exists a missing build is a set-up failure, not a
    reason to trace in Python unnoticed."""
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("no C++ compiler on this machine: runs trace collectives in Python")
    mod, why = native_build.load()
    assert mod is not None, why
    assert set(mod.op_names()) <= set(collectives.OPS)


@pytest.mark.parametrize("mask, api, by", [
    (0, None, None),
    (0b1000, None, "backward"),  # C++ hooks in the autograd engine (DDP's buckets)
    (0b1000, "all_reduce", None),  # a Python hook's own call: its api says it all
    (0b1100, None, "ddp"),
    (0b0011, "all_gather", "fsdp"),
])
def test_which_part_of_torch_issued_a_call_follows_the_python_kernel_s_rule(mask, api, by):
    assert [label for _, label in collectives._BY] == ["fsdp", "dtensor", "ddp", "backward"]
    assert native_trace._by(mask, api) == by


def test_the_kernel_s_records_become_the_trace_s(monkeypatch):
    tracer = native_trace.NativeTracer.__new__(native_trace.NativeTracer)
    tracer._attempt, tracer._ops, tracer._sites = 2, ["all_reduce", "barrier"], {}
    monkeypatch.setattr(native_trace, "_API_NAMES", ["all_reduce"])
    code = test_the_kernel_s_records_become_the_trace_s.__code__
    import torch

    recs = [  # seq, step, op, async, main, site, api, labels, t_issue, t_done, bytes, dtype, shapes, err
        (1, 3, 0, 0, True, (code, 12), 0, 0, 1_000_000_000, 1_500_000_000, 48, torch.float32, [[[4, 3]]], ""),
        (2, 3, 1, -1, False, None, -1, 0b1000, 2_000_000_000, 0, 1, torch.uint8, [[1]], ""),
        (3, 4, 0, 1, True, None, -1, 0, 3_000_000_000, 3_250_000_000, -1, None, [], "DistBackendError: gone"),
    ]
    out = tracer._records(recs, [(2, 2_500_000_000, "")], dropped=5)
    assert out[0] == {"a": 2, "seq": 1, "op": "all_reduce", "ph": "enter", "site": f"{code.co_filename}:12",
                      "api": "all_reduce", "by": None, "shapes": [[[4, 3]]], "dtype": "float32", "bytes": 48,
                      "step": 3, "main": True, "async": False, "t": 1.0}
    assert out[1] == {"a": 2, "seq": 1, "ph": "exit", "t": 1.5}
    assert out[2]["op"] == "barrier" and out[2]["by"] == "backward" and "async" not in out[2]
    assert out[2]["dtype"] == "uint8" and out[2]["site"] is None and out[2]["main"] is False
    assert out[3]["bytes"] is None and out[3]["dtype"] is None
    assert out[4] == {"a": 2, "seq": 3, "ph": "error", "err": "DistBackendError: gone", "t": 3.25}
    assert out[5] == {"a": 2, "seq": 2, "ph": "exit", "t": 2.5}  # completed after its enter had left
    assert out[6]["ph"] == "dropped" and out[6]["n"] == 5
    assert [r["ph"] for r in out] == ["enter", "exit", "enter", "enter", "error", "exit", "dropped"]


def _trace(run_dir: Path) -> dict[int, list[dict]]:
    key = rundir.load_run(run_dir)["key"]
    out = {}
    for rank in (0, 1):
        recs = rundir.read_records(rundir.rank_dir(run_dir, rank) / rundir.COLLECTIVES, key).valid
        out[rank] = [{k: v for k, v in r.items() if k != "t"} for r in recs]
    return out


def _start(run_dir: Path) -> dict:
    key = rundir.load_run(run_dir)["key"]
    recs = rundir.read_records(rundir.rank_dir(run_dir, 0) / rundir.EVENTS, key).valid
    return next(r for r in recs if r["kind"] == "start")


@pytest.mark.slow
@pytest.mark.parametrize("script, args", [("collectives_mix.py", []), ("dtensor.py", ["--steps", "3"])])
def test_the_cxx_kernel_writes_the_trace_the_python_kernel_writes(tmp_path, script, args):
    """Field for field, every rank: the same collectives, sites, apis, shapes, bytes, steps, in the
    same order, each seen complete; only the times differ. DataLoader workers forked after the
    trace had records send none of them again."""
    if native_build.load()[0] is None:
        pytest.skip(f"no build of the C++ kernel: {native_build.load()[1]}")
    runs = {}
    for kind in ("native", "python"):
        run_dir = tmp_path / kind
        env = {native_build.TRACE_ENV: kind}
        p = tw("run", str(FIXTURES / script), "--json", "--run-dir", str(run_dir), "--", *args, cwd=tmp_path, env=env)
        assert p.returncode == 0 and json.loads(p.stdout)["status"] == "ok", p.stdout + p.stderr
        assert _start(run_dir)["trace"] == kind
        runs[kind] = _trace(run_dir)
    assert _start(tmp_path / "python")["trace_why"] == f"{native_build.TRACE_ENV}=python"
    for rank in (0, 1):
        native, python = runs["native"][rank], runs["python"][rank]
        enters = [r for r in native if r["ph"] == "enter"]
        assert len(enters) >= 6 and len({r["seq"] for r in enters}) == len(enters)
        assert sorted(r["seq"] for r in native if r["ph"] == "exit") == [r["seq"] for r in enters]
        assert [r for r in native if r["ph"] == "enter"] == [r for r in python if r["ph"] == "enter"], rank
        # An exit leaves when its work is seen complete, which depends on the machine's timing (a
        # loaded machine sees DDP's two buckets done at one look or at two): compare them by seq.
        for ph in ("exit", "error"):
            assert (sorted((r for r in native if r["ph"] == ph), key=lambda r: r["seq"])
                    == sorted((r for r in python if r["ph"] == ph), key=lambda r: r["seq"])), (rank, ph)
    if script == "collectives_mix.py":
        ops = {r["op"] for r in runs["native"][0] if r["ph"] == "enter"}
        assert {"all_reduce", "all_gather_single", "reduce_scatter_single", "broadcast", "all_gather", "barrier",
                "send"} <= ops
        by_ddp = [r for r in runs["native"][0] if r["ph"] == "enter" and r["by"] in ("ddp", "backward")]
        assert by_ddp and all(r["site"].endswith("collectives_mix.py:33") for r in by_ddp if r["by"] == "backward")
