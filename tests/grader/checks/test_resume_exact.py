"""resume_exact on hand-built runs: a restart is judged against the submission's own uninterrupted
run (its path and its final parameters), never against the reference's."""

from __future__ import annotations

import pytest
import torch

from grader.checks import Context, run_check
from grader.evidence import load_run
from tests.grader.fakes import FakeManifest, spec
from tests.grader.rundirs import RunDirBuilder

STEPS = 16


def own_fp(step: int) -> float:
    """The submission's own path: not the reference's (its sampler shuffles with its own generator)."""
    return 3.0 + 0.02 * step


def _run(root, fps=None, restart=None, final=None):
    """fps: step -> fingerprint of attempt 0; restart: (start fp, [fps of steps 1..]) of attempt 1;
    final: every rank's final parameters."""
    fps = fps if fps is not None else {s: own_fp(s) for s in range(STEPS + 1)}
    final = final if final is not None else {"lit.model.w": torch.full((3,), own_fp(STEPS))}
    b = RunDirBuilder(root)
    for r in range(2):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        b.event(r, kind="fingerprint0", attempt=0, t=0.0, fp=fps[0])
        for s in sorted(k for k in fps if k):
            b.event(r, kind="step", attempt=0, t=float(s), step=s, dt=0.01, rss_mb=1.0, lr=[0.1], fp=fps[s])
        if restart:
            start, after = restart
            b.event(r, kind="fingerprint0", attempt=1, t=100.0, fp=start)
            for i, fp in enumerate(after, start=1):
                b.event(r, kind="step", attempt=1, t=100.0 + i, step=i, dt=0.01, rss_mb=1.0, lr=[0.1], fp=fp)
        b.exit(r, final, attempt=1 if restart else 0, t=200.0, steps=STEPS)
    return load_run(root.name, b.build())


def _resumed(tmp_path, killed_after=10, began=8, drift=0.0, final=None):
    fps = {s: own_fp(s) for s in range(killed_after + 1)}
    after = [own_fp(began + i) + (drift if i > 2 else 0.0) for i in range(1, STEPS - began + 1)]
    return _run(tmp_path / "resume", fps, (own_fp(began), after), final)


def _judge(tmp_path, resume, **fields):
    runs = {"main": _run(tmp_path / "main"), "resume": resume}
    return run_check(spec("resume_exact", checkpoint_interval=8, **fields), Context(FakeManifest(steps=STEPS), runs))


def test_a_resume_along_its_own_path_passes_whatever_the_reference_did(tmp_path):
    c = _judge(tmp_path, _resumed(tmp_path))
    assert c.passed, c.message
    assert "took the same steps as its own uninterrupted run" in c.message


@pytest.mark.parametrize("kw, says", [
    ({"began": 0}, "began from the initial parameters: 10 steps of work were lost"),
    ({"drift": 1e-3}, "left its own uninterrupted run's path at step 11"),
    ({"final": {"w": torch.full((3,), 9.0)}}, "ends at different parameters from its own uninterrupted run"),
    ({"final": {"w": torch.full((4,), 9.0)}}, "the two models differ in structure"),
])
def test_a_resume_that_is_not_exact_fails_naming_what(tmp_path, kw, says):
    c = _judge(tmp_path, _resumed(tmp_path, **kw))
    assert not c.passed and says in c.message, c.message


def test_a_restart_from_a_state_the_job_never_had_fails(tmp_path):
    fps = {s: own_fp(s) for s in range(11)}
    c = _judge(tmp_path, _run(tmp_path / "resume", fps, (42.0, [own_fp(9 + i) for i in range(1, 8)])))
    assert not c.passed and "began from parameters its own uninterrupted run never had" in c.message


def test_without_a_restarted_run_it_cannot_judge(tmp_path):
    c = run_check(spec("resume_exact"), Context(FakeManifest(steps=STEPS), {"main": _run(tmp_path / "main")}))
    assert not c.passed and c.environment and "killed and restarted" in c.message
