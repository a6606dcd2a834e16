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


def _run(root, fps=None, restart=None, status="ok", fingerprints=True, pre=None, fp_exit=None, skipped=(),
         ranks=(0, 1)):
    """fps: step -> fingerprint of attempt 0 (0: the initial parameters); restart: (start fp, [fps of
    steps 1..]) of attempt 1. With ``pre`` (step -> fp, or {} for none changed) each step record also
    has ``fp_pre``: where the step began, by default where the previous one ended; ``fp_exit``: the
    exit record's (default: the last step's, when ``pre`` is given); ``skipped``: steps GradScaler
    skipped (no ``fp_pre``). Only the ranks in ``ranks`` get ``pre``'s edits."""
    fps = fps if fps is not None else {s: ref_fp(s) for s in range(STEPS + 1)}
    b = RunDirBuilder(root, status=status)
    for r in range(2):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        if fingerprints:
            b.event(r, kind="fingerprint0", attempt=0, t=0.0, fp=fps[0])
        steps = sorted(k for k in fps if k)
        for i, s in enumerate(steps):
            rec = {"kind": "step", "attempt": 0, "t": float(s), "step": s, "dt": 0.01, "rss_mb": 1.0, "lr": [0.1]}
            if fingerprints:
                rec["fp"] = fps[s]
                if s in skipped:
                    rec["skipped"] = True
                elif pre is not None:
                    rec["fp_pre"] = pre.get(s, fps[steps[i - 1]] if i else fps[0]) if r in ranks else \
                        (fps[steps[i - 1]] if i else fps[0])
            b.event(r, **rec)
        if restart:
            start, after = restart
            b.event(r, kind="fingerprint0", attempt=1, t=100.0, fp=start)
            for i, fp in enumerate(after, start=1):
                rec = {"kind": "step", "attempt": 1, "t": 100.0 + i, "step": i, "dt": 0.01, "rss_mb": 1.0,
                       "lr": [0.1], "fp": fp}
                if pre is not None:
                    rec["fp_pre"] = after[i - 2] if i > 1 else start
                b.event(r, **rec)
        extra = {}
        if pre is not None:
            last = restart[1][-1] if restart else fps[max(fps)]
            extra["fp_exit"] = [fp_exit if fp_exit is not None and r in ranks else last]
        b.exit(r, attempt=1 if restart else 0, t=200.0, steps=STEPS, **extra)
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


def test_every_step_beginning_where_the_last_ended_passes(tmp_path):
    c = _judge(tmp_path, main=_run(tmp_path / "main", pre={}))
    assert c.passed, c.message


@pytest.mark.parametrize("kw, says", [
    # weights set by hand between steps 7 and 8: step 8 begins elsewhere (its own path may even be the reference's)
    ({"pre": {8: ref_fp(7) + 0.5}}, "rank 1's parameters in the main run changed between optimizer steps 7 and 8, "
                                     "outside any step the harness observed"),
    # an end state copied in after the last step
    ({"pre": {}, "fp_exit": ref_fp(16) + 0.25}, "rank 1's final parameters in the main run are not those its last "
                                                "optimizer step (step 16) left: they changed after it"),
    # a step GradScaler skipped leaves the parameters as they were: a change before it shows in its fp
    ({"pre": {}, "skipped": (5,), "fps": {s: ref_fp(s) for s in range(STEPS + 1)} | {5: ref_fp(4) + 0.1}},
     "changed between optimizer steps 4 and 5"),
])
def test_a_change_outside_an_observed_step_fails_with_the_steps_named(tmp_path, kw, says):
    c = _judge(tmp_path, main=_run(tmp_path / "main", ranks=(1,), **kw))
    assert not c.passed and says in c.message, c.message


def test_a_skipped_step_that_changed_nothing_passes(tmp_path):
    fps = {s: ref_fp(s) for s in range(STEPS + 1)} | {5: ref_fp(4)}  # step 5 skipped: the reference's too
    ref = _run(tmp_path / "reference", fps, pre={}, skipped=(5,))
    c = run_check(spec("trajectory"), Context(FakeManifest(steps=STEPS), {
        "main": _run(tmp_path / "main", fps, pre={}, skipped=(5,)), "reference": ref}))
    assert c.passed, c.message


def test_loading_a_checkpoint_before_a_restarts_first_step_is_expected(tmp_path):
    after = [ref_fp(8 + i) for i in range(1, 9)]
    resume = _run(tmp_path / "resume", _killed(11), (ref_fp(8), after), pre={})
    c = _judge(tmp_path, resume=resume, checkpoint_interval=8)
    assert c.passed, c.message


def test_nan_parameters_that_stay_nan_are_not_a_change(tmp_path):
    from grader.evidence.fingerprints import _same

    assert _same(float("nan"), float("nan")) and not _same(float("nan"), 1.0) and _same(1.0, 1.0 + 1e-12)


@pytest.mark.parametrize("drift, passes", [
    (0.0, True),      # the reference graded again, and every valid variant measured
    (1.02e-6, True),  # comm-bound's all-reduce per micro-batch: the same sums in another order
    (2.7e-5, False),  # the smallest divergence of a real fault measured (incident-multi's sampler)
])
def test_the_default_tolerance_sits_between_reordered_sums_and_real_faults(tmp_path, drift, passes):
    # fingerprints of the size the exercises' are (tens): atol alone must not decide
    fps = {s: 50 * ref_fp(s) * (1 + (drift if s > STEPS // 2 else 0.0)) for s in range(STEPS + 1)}
    ref = {s: 50 * ref_fp(s) for s in range(STEPS + 1)}
    runs = {"main": _run(tmp_path / "main", fps), "reference": _run(tmp_path / "reference", ref)}
    c = run_check(spec("trajectory"), Context(FakeManifest(steps=STEPS), runs))
    assert c.passed is passes, c.message
