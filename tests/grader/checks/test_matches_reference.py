"""matches_reference on hand-built final parameters: tolerance, replicas that diverged, records
altered after the run, a missing reference."""

from __future__ import annotations

import pytest
import torch

from grader.checks import Context, run_check
from grader.evidence import load_run
from harness import rundir
from tests.grader.fakes import ctx_for, spec


def _params(v: float) -> dict[str, torch.Tensor]:
    return {"w": torch.full((3,), v)}


@pytest.mark.parametrize("mine, theirs, rank1, passed, says", [
    (1.0, 1.0, 1.0, True, "identical"),
    (1.0, 1.0 + 1e-7, 1.0, True, "match"),
    (1.0, 1.5, 1.0, False, "differ from the reference"),
    (1.0, 1.0, 2.0, False, "rank 1's final parameters differ from rank 0's"),
])
def test_matches_reference(tmp_path, mine, theirs, rank1, passed, says):
    ctx = ctx_for(tmp_path, main={"params": {0: _params(mine), 1: _params(rank1)}},
                  reference={"params": {0: _params(theirs), 1: _params(theirs)}})
    c = run_check(spec("matches_reference"), ctx)
    assert c.passed is passed and says in c.message


def test_tampered_final_params_do_not_count(tmp_path):
    ctx = ctx_for(tmp_path, main={"params": {0: _params(1.0), 1: _params(1.0)}},
                  reference={"params": {0: _params(2.0), 1: _params(2.0)}})
    for r in (0, 1):  # overwrite with the reference's values after the run: the signed hash differs
        rundir.save_params(_params(2.0), tmp_path / "main" / "ranks" / str(r) / rundir.FINAL_PARAMS)
    ctx = Context(ctx.manifest, {k: load_run(k, tmp_path / k) for k in ("main", "reference")})
    c = run_check(spec("matches_reference"), ctx)
    assert not c.passed and "left no final parameters" in c.message


def test_a_missing_run_is_an_environment_failure_not_a_verdict(tmp_path):
    c = run_check(spec("matches_reference"), ctx_for(tmp_path, main={}))
    assert not c.passed and c.environment
