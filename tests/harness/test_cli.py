"""`trainwreck run`, `list` and `show` from the outside: exit codes, JSON shape, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

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
    assert {"status", "run_dir", "world_size", "wall_s", "ranks", "hang"} <= set(out)
    assert out["status"] == "ok" and out["world_size"] == 2 and out["hang"] is None
    assert out["run_dir"] == str(tmp_path / "r") and isinstance(out["wall_s"], float) and out["wall_s"] > 0
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    for r in out["ranks"]:
        assert set(r) == {"rank", "exit_code", "steps", "steps_per_s", "peak_rss_mb", "last_location"}
        assert r["steps"] == 6 and r["exit_code"] == 0
        assert isinstance(r["steps_per_s"], float) and isinstance(r["peak_rss_mb"], float)
        assert r["last_location"] == str(FIXTURES / "ddp_ok.py") + ":32"  # not under the cwd: absolute
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


def test_device_cuda_without_gpus_is_a_usage_error(tmp_path):
    p = tw("run", str(FIXTURES / "ddp_ok.py"), "--device", "cuda", "--run-dir", str(tmp_path / "r"),
           cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 2
    assert p.stderr.strip() == "error: --device cuda needs 2 GPUs, 0 visible; lower --nproc or use --device cpu"
    assert not (tmp_path / "r" / "run.json").exists() and not (tmp_path / "r" / "ranks").exists()


@pytest.mark.slow
def test_tee_prints_each_ranks_output_prefixed(tmp_path):
    p = tw("run", str(FIXTURES / "ddp_ok.py"), "--tee", "--run-dir", str(tmp_path / "r"), "--", "--steps", "9")
    assert p.returncode == 0
    assert "[rank 0] step 8 loss" in p.stderr  # only rank 0 prints losses
    assert "ddp_ok.py:32" in p.stdout  # the summary's last collective site
