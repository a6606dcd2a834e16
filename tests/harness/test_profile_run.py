"""`trainwreck run --profile` on real 2-rank gloo jobs: the phases find the bottleneck, the trace
is a valid Chrome trace of the scheduled steps, and a crashing job still ends cleanly."""

from __future__ import annotations

import json

import pytest

from grader import console
from harness.phases import PHASES
from tests.conftest import FIXTURES, assert_nothing_left
from tests.harness.test_cli import tw


@pytest.mark.slow
def test_profile_finds_the_input_bound_phase(tmp_path, capsys):
    p = tw("run", str(FIXTURES / "slow_data.py"), "--profile", "--json", "--run-dir", str(tmp_path / "r"),
           "--", "--steps", "14", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    prof = out["profile"]
    assert [r["rank"] for r in prof["ranks"]] == [0, 1]
    for r in prof["ranks"]:
        ph = r["phases"]
        assert set(ph) == set(PHASES) and r["steps"] == 14 and r["counted"] == 8  # 14 - 2 start-up - 4 traced
        # every sample sleeps 10 ms, 4 per step: waiting for data must dominate the step
        assert ph["data"]["share"] > 0.5, ph
        assert all(ph["data"]["median_ms"] > ph[q]["median_ms"] for q in PHASES if q != "data"), ph
        assert ph["data"]["median_ms"] >= 40.0 * 0.95
        # the loss all-reduce, forward and backward are seen; a save every 4th step shows in the share
        for q in ("forward", "backward", "sync", "optimizer", "checkpoint"):
            assert ph[q]["share"] > 0, q
        assert r["background_checkpoint_ms"] > 0  # the save on another thread, kept out of the phases
        assert r["trace_steps"] == [6, 8] and r["trace"] == str(tmp_path / "r" / "ranks" / str(r["rank"])
                                                                 / "trace.a0.pt.trace.json")
        trace = json.loads(open(r["trace"]).read())
        names = {e.get("name") for e in trace["traceEvents"]}
        assert {"ProfilerStep#5", "ProfilerStep#6", "ProfilerStep#7"} <= names  # optimizer steps 6-8
        assert "ProfilerStep#4" not in names and "ProfilerStep#8" not in names
        assert any(str(n).startswith("aten::") for n in names)

    console.profile_table(prof)  # the table `trainwreck run --profile` prints, from the same numbers
    table = capsys.readouterr().out
    for q in ("step", *PHASES):
        assert f"│ {q} " in table, q
    assert "rank 0 ms" in table and "rank 1 ms" in table and "trace of steps 6-8" in table
    assert_nothing_left(tmp_path)


@pytest.mark.slow
def test_profile_of_a_crashing_job_reports_no_trace_and_keeps_the_failure(tmp_path):
    p = tw("run", str(FIXTURES / "crash.py"), "--profile", "--run-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert p.returncode == 1
    assert "rank 1 failed" in p.stdout and "synthetic failure" in p.stdout
    assert "no trace (the trace records optimizer steps 6-8, this rank made 4)" in p.stdout
    assert "trace of steps" not in p.stdout and "Traceback" not in p.stderr
    assert not list((tmp_path / "r" / "ranks").glob("*/trace*"))
    events = (tmp_path / "r" / "ranks" / "1" / "events.jsonl").read_text()
    assert '"status":"exception"' in events and "synthetic failure" in events
    assert_nothing_left(tmp_path)
