"""trajectory on hand-built fingerprints: the path against the reference's, initial parameters, a
restart's starting point and the work it lost, and runs recorded without fingerprints."""

from __future__ import annotations

import pytest

from grader.checks import Context, run_check
from grader.evidence import load_run
from tests.grader.fakes import FakeManifest, spec
from tests.grader.rundirs import RunDirBuilder

STEPS = 16


def ref_fp(step: int) -> float:
    return 1.0 + 0.01 * step


def _run(root, fps=None, restart=None, status="ok", fingerprints=True):
    """fps: step -> fingerprint of attempt 0 (0: the initial parameters); restart: (start fp, [fps of
    steps 1..]) of attempt 1."""
    fps = fps if fps is not None else {s: ref_fp(s) for s in range(STEPS + 1)}
    b = RunDirBuilder(root, status=status)
    for r in range(2):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        if fingerprints:
            b.event(r, kind="fingerprint0", attempt=0, t=0.0, fp=fps[0])
        for s in sorted(k for k in fps if k):
            rec = {"kind": "step", "attempt": 0, "t": float(s), "step": s, "dt": 0.01, "rss_mb": 1.0, "lr": [0.1]}
            b.event(r, **(rec | ({"fp": fps[s]} if fingerprints else {})))
        if restart:
            start, after = restart
            b.event(r, kind="fingerprint0", attempt=1, t=100.0, fp=start)
            for i, fp in enumerate(after, start=1):
                b.event(r, kind="step", attempt=1, t=100.0 + i, step=i, dt=0.01, rss_mb=1.0, lr=[0.1], fp=fp)
        b.exit(r, attempt=1 if restart else 0, t=200.0, steps=STEPS)
    return load_run(root.name, b.build())


def _judge(tmp_path, main=None, resume=None, **fields):
    runs = {"main": main or _run(tmp_path / "main"), "reference": _run(tmp_path / "reference")}
    if resume is not None:
        runs["resume"] = resume
    return run_check(spec("trajectory", **fields), Context(FakeManifest(steps=STEPS), runs))


def test_the_reference_path_passes(tmp_path):
    c = _judge(tmp_path)
    assert c.passed and "followed the reference run's path at every step (16 steps" in c.message


@pytest.mark.parametrize("edit, says", [
    ({0: 0.5}, "began from other initial parameters than the reference run"),
    ({7: ref_fp(7) * 1.001}, "left the reference run's path at step 7 (its parameters' fingerprint differs by 1.00e-03"),
    ({16: ref_fp(16) + 1e-3}, "left the reference run's path at step 16"),  # an end state copied in at the end
])
def test_leaving_the_path_names_the_first_step(tmp_path, edit, says):
    fps = {s: ref_fp(s) for s in range(STEPS + 1)} | edit
    c = _judge(tmp_path, main=_run(tmp_path / "main", fps))
    assert not c.passed and says in c.message, c.message


def test_rounding_within_tolerance_is_the_same_path(tmp_path):
    fps = {s: ref_fp(s) * (1 + 5e-7) for s in range(STEPS + 1)}
    assert _judge(tmp_path, main=_run(tmp_path / "main", fps)).passed


def _killed(after: int) -> dict[int, float]:
    return {s: ref_fp(s) for s in range(after + 1)}


@pytest.mark.parametrize("start, interval, passed, says", [
    (8, 8, True, "the restarted runs (resume) went on along it"),      # newest checkpoint: 8
    (0, 8, False, "began from the initial parameters: 11 steps of work were lost"),  # retrained from scratch
    (0, None, True, "went on along it"),                                # no interval declared: any point
    (None, 8, False, "began from parameters the reference run never had"),
])
def test_a_restart_must_resume_from_the_newest_checkpoint_and_follow_the_path(tmp_path, start, interval, passed, says):
    begin = 0.123 if start is None else ref_fp(start)
    after = [ref_fp((start or 0) + i) for i in range(1, STEPS - (start or 0) + 1)]
    resume = _run(tmp_path / "resume", _killed(11), (begin, after))
    fields = {"checkpoint_interval": interval} if interval else {}
    c = _judge(tmp_path, resume=resume, **fields)
    assert c.passed is passed and says in c.message, c.message


def test_a_restart_that_leaves_the_path_after_resuming(tmp_path):
    after = [ref_fp(8 + i) for i in range(1, 9)]
    after[3] += 0.5
    c = _judge(tmp_path, resume=_run(tmp_path / "resume", _killed(11), (ref_fp(8), after)), checkpoint_interval=8)
    assert not c.passed and "restart left the reference run's path at step 12" in c.message, c.message


def test_without_fingerprints_it_cannot_judge(tmp_path):
    c = _judge(tmp_path, main=_run(tmp_path / "main", fingerprints=False))
    assert not c.passed and c.environment and "not recorded with parameter fingerprints" in c.message
