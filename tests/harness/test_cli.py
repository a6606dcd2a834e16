"""`trainwreck run`, `list` and `show` from the outside: exit codes, JSON shape, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader import console
from harness import rundir
from tests.conftest import FIXTURES, assert_nothing_left


def tw(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "grader.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, **(env or {})}, timeout=300)


@pytest.mark.slow
def test_run_json_has_the_documented_shape(tmp_path):
    p = tw("run", str(FIXTURES / "ddp_ok.py"), "--json", "--run-dir", str(tmp_path / "r"), "--", "--steps", "6",
           cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert {"status", "run_dir", "world_size", "wall_s", "ranks", "hang", "cwd", "pg_timeout"} <= set(out)
    assert out["status"] == "ok" and out["world_size"] == 2 and out["hang"] is None
    assert out["run_dir"] == str(tmp_path / "r") and isinstance(out["wall_s"], float) and out["wall_s"] > 0
    assert out["cwd"] == str(tmp_path) and out["pg_timeout"] is None  # the caller's directory; torch's timeout
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    for r in out["ranks"]:
        assert set(r) == {"rank", "exit_code", "steps", "steps_per_s", "peak_rss_mb", "last_location",
                          "location_kind", "location_op"}
        assert r["steps"] == 6 and r["exit_code"] == 0
        assert isinstance(r["steps_per_s"], float) and isinstance(r["peak_rss_mb"], float)
        # DDP's last bucket all-reduce, issued while loss.backward() ran; not under the cwd: absolute
        assert r["last_location"] == str(FIXTURES / "ddp_ok.py") + ":28"
        assert (r["location_kind"], r["location_op"]) == ("last collective", "all_reduce")
    assert "profile" not in out and not list((tmp_path / "r").rglob("profile.jsonl"))  # only with --profile
    assert_nothing_left(tmp_path)


@pytest.mark.slow
def test_run_exits_1_when_the_job_fails(tmp_path):
    p = tw("run", str(FIXTURES / "crash.py"), "--run-dir", str(tmp_path / "r"))
    assert p.returncode == 1
    assert "rank 1 failed" in p.stdout and "synthetic failure" in p.stdout
    assert_nothing_left(tmp_path)


@pytest.mark.slow
def test_run_exits_1_when_the_job_hangs(tmp_path):
    p = tw("run", str(FIXTURES / "hang.py"), "--json", "--hang-timeout", "5", "--run-dir", str(tmp_path / "r"))
    assert p.returncode == 1
    out = json.loads(p.stdout)
    assert out["status"] == "hung" and out["hang"]["phase"] == "running"
    assert [r["blocked_at"].rsplit("/", 1)[-1] for r in out["hang"]["ranks"]] == ["hang.py:19", "hang.py:17"]
    assert_nothing_left(tmp_path)


@pytest.mark.slow
def test_pg_timeout_flag_is_applied_and_said(tmp_path):
    p = tw("run", str(FIXTURES / "ddp_ok.py"), "--pg-timeout", "45", "--run-dir", str(tmp_path / "r"),
           "--", "--steps", "3", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert ("process-group timeout: 45 s, set by the harness (--pg-timeout) where the script gave none: "
            "ranks 0, 1") in p.stdout
    assert rundir.load_run(tmp_path / "r")["pg_timeout"] == {"s": 45.0, "applied_on_ranks": [0, 1]}
    assert_nothing_left(tmp_path)


def test_help_says_where_the_script_runs():
    p = tw("run", "--help")
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    assert "The script runs in the current directory, as under torchrun" in text and "--pg-timeout" in text


def summary(ranks, capsys, **extra) -> str:
    """What `trainwreck run` prints, captured as a pipe or a CI log sees it (not a terminal)."""
    res = SimpleNamespace(status="failed", world_size=len(ranks), device="cpu", wall_s=3.0, run_dir="/tmp/r",
                          hang=None, failure=None, cwd=Path("/home/u/proj"), pg_timeout=None, ranks=ranks)
    for k, v in extra.items():
        setattr(res, k, v)
    console.run_summary(res)
    return capsys.readouterr().out


def rank_row(rank, **kw):
    return {"rank": rank, "exit_code": 0, "steps": 12, "steps_per_s": 30.0, "peak_rss_mb": 300.0,
            "last_location": None, "location_kind": None, "location_op": None, **kw}


@pytest.mark.parametrize("row, shown", [
    (rank_row(0, last_location="/home/someone/examples/distributed/ddp-tutorial-series/multigpu_torchrun.py:45",
              location_kind="last collective", location_op="all_reduce"), "last all_reduce at multigpu_torchrun.py:45"),
    (rank_row(0, last_location="/w/train.py:19", location_kind="blocked", location_op="barrier"),
     "blocked at train.py:19 in barrier"),
    (rank_row(0, last_location="/w/train.py:15", location_kind="raised"), "raised at train.py:15"),
    (rank_row(0, last_location="/w/train.py:17", location_kind="failed collective", location_op="all_reduce"),
     "all_reduce failed at train.py:17"),
    (rank_row(0, last_location="/w/train.py:17", location_kind="pending collective", location_op="send"),
     "in send at train.py:17"),
    (rank_row(0, last_location="sub/train.py:7", location_kind="raised"), "raised at sub/train.py:7"),  # run.json: relative
    (rank_row(0), "-"),
])
def test_location_column_keeps_its_line_number_when_not_a_terminal(capsys, row, shown):
    out = summary([row], capsys)
    cells = [line.split("│")[-2].strip() for line in out.splitlines() if line.startswith("│")]
    assert " ".join(cells) == shown, out


def test_a_rank_that_never_stepped_shows_no_data(capsys):
    out = summary([rank_row(0), rank_row(1, steps=0, steps_per_s=None, peak_rss_mb=None, exit_code=None)], capsys)
    row1 = next(line for line in out.splitlines() if line.startswith("│ 1 "))
    assert row1.count("no data") == 2 and "0.0" not in row1


def test_device_cuda_without_gpus_is_a_usage_error(tmp_path):
    p = tw("run", str(FIXTURES / "ddp_ok.py"), "--device", "cuda", "--run-dir", str(tmp_path / "r"),
           cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 2
    assert p.stderr.strip() == "error: --device cuda needs a GPU, none is visible; use --device cpu"
    assert not (tmp_path / "r" / "run.json").exists() and not (tmp_path / "r" / "ranks").exists()


@pytest.mark.slow
def test_tee_prints_each_ranks_output_prefixed(tmp_path):
    p = tw("run", str(FIXTURES / "ddp_ok.py"), "--tee", "--run-dir", str(tmp_path / "r"), "--", "--steps", "9")
    assert p.returncode == 0
    assert "[rank 0] step 8 loss" in p.stderr  # only rank 0 prints losses
    # the summary's location: the script's all_reduce after step 8's backward, relative to the cwd
    assert "last all_reduce at" in p.stdout and "tests/fixtures/ddp_ok.py:32" in p.stdout
