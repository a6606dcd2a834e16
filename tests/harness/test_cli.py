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
def test_a_straggler_outside_any_collective_is_reported_and_the_job_finishes(tmp_path):
    """Issue 30: rank 0 waits 40 s outside any collective (a blocking upload) while rank 1 waits in
    DDP's all-reduce. Well past the 5 s hang timeout, the job is not ended: the straggler is said
    live (stderr) and in the summary, and the job finishes as under bare torchrun."""
    source = (FIXTURES / "straggler.py").read_text().splitlines()
    sleeps = f"fixtures/straggler.py:{source.index('        time.sleep(seconds)  # the line a straggler report names') + 1}"
    backward = f"fixtures/straggler.py:{source.index('    loss.backward()') + 1}"
    p = tw("run", str(FIXTURES / "straggler.py"), "--hang-timeout", "5", "--run-dir", str(tmp_path / "r"),
           "--", "--wait-s", "40", cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "status: ok" in p.stdout
    live = p.stderr.splitlines()
    assert live[0].startswith("straggler: rank 1 waits in a collective for rank 0, which is outside any collective "
                              "(no progress for ") and "not a hang: the job goes on" in live[0]
    assert live[1].startswith(f"  rank 0 is outside any collective at {sleeps}, sleeping for ")
    assert live[2].startswith(f"  rank 1 waits in all_reduce #9 (called at {backward}) for ")
    assert any(ln.startswith("stall over: the job made progress again after ") for ln in live)
    run = rundir.load_run(tmp_path / "r")
    assert run["status"] == "ok" and run["hang"] is None and [r["steps"] for r in run["ranks"]] == [6, 6]
    [ep] = run["stalls"]
    assert ep["kind"] == "straggler" and ep["ended_by"] == "progress"
    # the wait is 40 s; the stall began at the ranks' last progress, a fraction of a second before it.
    # Generous both ways: a loaded machine adds seconds to the step before the wait and the one after
    assert 38 <= ep["lasted_s"] <= 50, ep
    assert [(v["rank"], v["state"], v["doing"]) for v in ep["ranks"]] == [
        (0, "outside any collective", "sleeping"), (1, "waiting in a collective", None)]
    assert "  straggler for " in p.stdout and f"rank 0 is outside any collective at {sleeps}" in p.stdout
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


STRAGGLER_EPISODE = {
    "kind": "straggler", "ended_by": "progress", "lasted_s": 40.3,
    "summary": ["straggler: rank 1 waits in a collective for rank 0, which is outside any collective",
                "rank 0 is outside any collective at w/train.py:331, sleeping for 39.8 s",
                "rank 1 waits in all_reduce #61 (called at w/train.py:312) for 39.7 s"]}


def test_the_summary_keeps_the_stalls_the_job_came_back_from(capsys):
    out = summary([rank_row(0), rank_row(1)], capsys, status="ok", stalls=[
        STRAGGLER_EPISODE, {**STRAGGLER_EPISODE, "ended_by": "the end of the run"}])  # the second is hang.txt's
    lines = out.splitlines()
    at = lines.index("stalls the job came back from (1; each lasted the hang timeout or longer, and no "
                     "collective was stuck):")
    assert lines[at + 1:at + 4] == [
        "  straggler for 40.3 s: rank 1 waits in a collective for rank 0, which is outside any collective",
        "    rank 0 is outside any collective at w/train.py:331, sleeping for 39.8 s",
        "    rank 1 waits in all_reduce #61 (called at w/train.py:312) for 39.7 s"]
    assert "stalls the job came back from" not in summary([rank_row(0)], capsys, status="ok", stalls=[])


def test_stall_notices_say_a_straggler_once_its_line_is_known_and_when_it_is_over(capsys):
    from harness.monitor import Snapshot
    from harness.stall import RankFacts, classify
    from harness.threadstate import ThreadState

    sleeping = ThreadState("S", 230, "hrtimer_nanosleep", "sleeping")
    bucket = {"op": "all_reduce", "seq": 9, "site": "/w/train.py:54", "async": True}

    def snap(since, site=None, stalled=True):
        stall = classify([RankFacts(0, thread=sleeping, site=site, quiet_s=since),
                          RankFacts(1, open=[bucket], quiet_s=since)], 2) if stalled else None
        return Snapshot(elapsed_s=30.0, attempt=0, ranks=[], since_progress_s=since, phase="running",
                        stall=stall, stall_limit_s=1830.0)

    seen = []
    notify = console.stall_notices(seen.append)
    for s in (snap(5.1), snap(6.1), snap(7.1, "/w/train.py:31"), snap(8.1, "/w/train.py:31"),
              snap(0.1, stalled=False), snap(0.2, stalled=False)):
        notify(s)
    assert len(seen) == 6  # the live table still gets every snapshot
    assert capsys.readouterr().err.splitlines() == [
        "straggler: rank 1 waits in a collective for rank 0, which is outside any collective (no progress for "
        "7.1 s); not a hang: the job goes on, ended only after 1830 s without progress (--stall-timeout)",
        "  rank 0 is outside any collective at w/train.py:31, sleeping for 7.1 s",
        "  rank 1 waits in all_reduce #9 (called at w/train.py:54) for 7.1 s",
        "stall over: the job made progress again after 8.1 s without any",
    ]


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
