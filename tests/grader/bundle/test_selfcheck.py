"""The bundle's self-check, both ways, for every script exercise: the broken script as shipped never
passes (it fails, or says it could not judge), and the reference solution copied over the
candidate's files never fails (it passes, or says it could not judge). Real trainings: one
self-check per case, run from a bundle of all of them with the kit's own `python selfcheck.py`.

Measured on the 2-core machine at load 8-10: 17 minutes for the 20 cases (1027 s; 26-127 s each:
checkpoint-resume's three launches, 127 s and 101 s, and the speed exercises' side-by-side runs,
48-90 s, are the longest). The figures each case judged are printed (pytest -s), for the margins
in docs/design.md. So `make test` self-checks two exercises both ways (``CI_TIER``: memory-leak, whose
correct fix the self-check once failed, and amp-no-scaler, judged by the overflow it must survive);
`make selfcheck` (``TRAINWRECK_SELFCHECK_ALL=1``) runs all twenty."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.bundle.build import build
from grader.exercises import discover, kit_root
from grader.sessions.workspace import is_graded

SCRIPT_EXERCISES = sorted(e.slug for e in discover()[0] if is_graded(e.manifest) and e.kind == "script")
CI_TIER = ("amp-no-scaler", "memory-leak")
WHOLE = os.environ.get("TRAINWRECK_SELFCHECK_ALL") == "1"
CASES = [pytest.param(s, marks=() if WHOLE or s in CI_TIER else pytest.mark.skip(
    reason="the whole self-check suite (17 min) runs with `make selfcheck`")) for s in SCRIPT_EXERCISES]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """Two bundles of every script exercise: as shipped, and with each reference solution's files
    in place of the candidate's."""
    root = tmp_path_factory.mktemp("selfcheck")
    build(SCRIPT_EXERCISES, root / "broken")
    build(SCRIPT_EXERCISES, root / "reference")
    for slug in SCRIPT_EXERCISES:
        for f in (kit_root() / "solutions" / slug).glob("*.py"):
            shutil.copy2(f, root / "reference" / "exercises" / slug / f.name)
    return {"broken": root / "broken", "reference": root / "reference"}


def selfcheck(bundle: Path, slug: str) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "selfcheck.py", slug, "--json"], cwd=bundle, capture_output=True,
                       text=True, timeout=580)
    assert p.stdout, p.stderr[-3000:]
    out = json.loads(p.stdout)
    print(bundle.name, slug, json.dumps(out["checks"]))  # the figures, for the margins (pytest -s)
    return p.returncode, out


def test_every_script_exercise_is_bundled():
    assert len(SCRIPT_EXERCISES) == 13


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("slug", CASES)
def test_the_broken_script_never_passes(bundles, slug):
    rc, out = selfcheck(bundles["broken"], slug)
    assert out["status"] in ("failed", "could not judge"), out
    assert rc == {"failed": 1, "could not judge": 3}[out["status"]]
    if out["status"] == "failed":  # failed on a property of the exercise, not on how it was launched
        assert any(not c["passed"] and not c["could_not_judge"] for c in out["checks"]), out


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("slug", CASES)
def test_the_reference_solution_never_fails(bundles, slug):
    rc, out = selfcheck(bundles["reference"], slug)
    failed = [c for c in out["checks"] if not c["passed"] and not c["could_not_judge"]]
    assert not failed, failed
    assert (rc, out["status"]) in ((0, "passed"), (3, "could not judge")), out
