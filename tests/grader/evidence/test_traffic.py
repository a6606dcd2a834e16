"""The collective trace's claims against the bytes the run's loopback carried
(grader.evidence.traffic), and collectives_per_step failing on the parent's count."""

from __future__ import annotations

import pytest

from grader import crosscheck
from grader.checks import Context, run_check
from grader.evidence import load_run, traffic
from harness import rundir
from harness.isolation import PROC_SAMPLES
from tests.grader.fakes import FakeManifest, spec
from tests.grader.rundirs import KEY, RunDirBuilder

MB = 2**20


def _run(root, claimed_per_step: int, sent_per_step: int | None, steps: int = 40, world_size: int = 2):
    """Two ranks, one all-reduce a step of ``claimed_per_step`` bytes each, received a step apart;
    the parent's samples every other step count ``sent_per_step`` bytes a step on loopback."""
    b = RunDirBuilder(root, world_size, sandbox={"isolated": True})
    for r in range(world_size):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        for s in range(1, steps + 1):
            b.add(r, rundir.COLLECTIVES, a=0, seq=s, op="all_reduce", ph="enter", site="t.py:9", shapes=[[4]],
                  dtype="float32", step=s - 1, t=float(s), rt=float(s) + 0.01, bytes=claimed_per_step)
            b.add(r, rundir.COLLECTIVES, a=0, seq=s, ph="exit", t=float(s))
            b.event(r, kind="step", attempt=0, t=float(s), rt=float(s) + 0.01, step=s, dt=0.01, rss_mb=1.0, lr=[0.1])
            if s % 2 == 0:
                sample = {"a": 0, "t": float(s) + 0.3, "pid": 100 + r, "rss_mb": 1.0, "tree_rss_mb": 1.0,
                          "cpu_s": s * 0.01, "tree_cpu_s": s * 0.01, "threads": 4, "procs": 1}
                if sent_per_step is not None:
                    sample["net_tx"] = 1000 + s * sent_per_step
                b.add(r, PROC_SAMPLES, **sample)
        b.exit(r, t=steps + 1.0, steps=steps)
    return b.build()


def test_honest_traffic_measures_the_claims_against_the_wire(tmp_path):
    tr = load_run("main", _run(tmp_path, MB, 2 * MB)).traffic  # both ranks' inputs, each sent once
    assert tr is not None and tr.records == 2 * 38 and tr.claimed == 2 * 38 * MB and tr.sent == 38 * 2 * MB
    assert tr.ratio == pytest.approx(1.0) and traffic.disagreement(tr) is None


def test_collectives_claimed_that_never_sent_are_a_disagreement(tmp_path):
    tr = load_run("main", _run(tmp_path, MB, 1000)).traffic
    what = traffic.disagreement(tr)
    assert what and "claims 76.0 MB handed to collectives" in what and "loopback carried 0.0 MB" in what, what


def test_traffic_the_trace_did_not_see_is_a_disagreement(tmp_path):
    what = traffic.disagreement(load_run("main", _run(tmp_path, MB, 40 * MB)).traffic)
    assert what and "traffic the trace did not see" in what, what


def test_runs_without_a_loopback_count_or_with_little_claimed_say_nothing(tmp_path):
    assert load_run("main", _run(tmp_path / "a", MB, None)).traffic is None  # unisolated: no count
    small = load_run("main", _run(tmp_path / "b", 1000, 0)).traffic
    assert small is not None and traffic.disagreement(small) is None  # 76 kB claimed: store chatter's size


@pytest.mark.parametrize("sent, passed", [(2 * MB, True), (0, False)])
def test_collectives_per_step_fails_on_the_parents_count(tmp_path, sent, passed):
    m = FakeManifest()
    c = run_check(spec("collectives_per_step", max_per_step=2), Context(m, {"main": load_run("main", _run(tmp_path, MB, sent))}))
    assert c.passed is passed, c.message
    assert c.evidence["traffic"]["claimed"] == 76 * MB
    if not passed:
        assert "collectives claimed that never sent their data" in c.message, c.message


def test_the_flag_reaches_the_interviewer_from_the_run_dir(tmp_path):
    """crosscheck.traffic_disagreement reads both ranks' samples and both ranks' traces (a generator
    of ranks read twice left the traces unread, and no run was ever flagged)."""
    assert crosscheck.traffic_disagreement("main", _run(tmp_path / "honest", MB, 2 * MB), KEY) == []
    found = crosscheck.traffic_disagreement("main", _run(tmp_path / "forged", MB, 1000), KEY)
    assert [f.kind for f in found] == ["disagree"] and "never sent their data" in found[0].what


def test_a_world_of_one_process_is_never_flagged_for_collectives_that_sent_nothing(tmp_path):
    """A script that all-reduces by hand, run at world size 1 (world_size_equivalence's run): its
    collectives have no peer, so nothing crosses the loopback whatever the trace claims."""
    assert crosscheck.traffic_disagreement("ws1", _run(tmp_path, MB, 0, world_size=1), KEY) == []
