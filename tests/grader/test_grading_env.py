"""The environment every grading run gets (grader.roles.GRADING_ENV), whatever the grader's own."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grader import grade
from grader.exercises import find_script
from harness.rundir import GRADING_EVIDENCE_ENV


@pytest.mark.parametrize("callers_omp", [None, "8"])
@pytest.mark.parametrize("extra", [{}, {"TRAINWRECK_FINGERPRINT": "1"}])
def test_every_grading_run_gets_the_grading_environment(tmp_path, monkeypatch, callers_omp, extra):
    if callers_omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", callers_omp)
    seen = []
    monkeypatch.setattr(grade, "launch", lambda cfg: seen.append(cfg) or SimpleNamespace(status="ok"))
    monkeypatch.setattr(grade.sealing, "seal", lambda run_dir: None)
    monkeypatch.setattr(grade, "load_run", lambda role, run_dir: role)
    ex = find_script("memory-leak")
    grade.run_role(ex, ex.dir, tmp_path / "run", "reference", "cpu", 1, env=dict(extra))
    env = seen[0].env
    # one thread per rank even for a one-rank role and a grader that asked for more: the submission
    # and the reference meet the same arithmetic; the evidence only the checks read is on. All are
    # harness settings the bootstrap applies, never variables the script sees
    # (tests/harness/test_bootstrap_settings.py launches them)
    assert env["TRAINWRECK_THREADS"] == "1" and env[GRADING_EVIDENCE_ENV] == "1"
    assert env["TRAINWRECK_MMAP_THRESHOLD"] == str(128 * 1024)
    assert "OMP_NUM_THREADS" not in env and "MALLOC_MMAP_THRESHOLD_" not in env
    assert env["TRAINWRECK_SHOW_TORCHELASTIC_MAX_RESTARTS"] == "1"  # every role, restarted or not
    assert all(env[k] == v for k, v in extra.items())
