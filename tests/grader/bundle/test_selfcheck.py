"""The bundle's self-check, both ways, for every script exercise: the broken script as shipped never
passes (it fails, or says it could not judge), and the reference solution copied over the
candidate's files never fails (it passes, or says it could not judge). Real trainings: one
self-check per case, run from a bundle of all of them with the kit's own `python selfcheck.py`.

Measured on the 2-core CI machine: about 14 minutes for the 20 cases (the deadlock's hang timeout
and the speed exercises' side-by-side rounds are most of it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.bundle.build import build
from grader.exercises import discover, kit_root
from grader.sessions.workspace import is_graded

SCRIPT_EXERCISES = sorted(e.slug for e in discover()[0] if is_graded(e.manifest) and e.kind == "script")


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
                       text=True, timeout=900)
    assert p.stdout, p.stderr[-3000:]
    return p.returncode, json.loads(p.stdout)


def test_every_script_exercise_is_bundled():
    assert len(SCRIPT_EXERCISES) == 10


@pytest.mark.slow
@pytest.mark.parametrize("slug", SCRIPT_EXERCISES)
def test_the_broken_script_never_passes(bundles, slug):
    rc, out = selfcheck(bundles["broken"], slug)
    assert out["status"] in ("failed", "could not judge"), out
    assert rc == {"failed": 1, "could not judge": 3}[out["status"]]
    if out["status"] == "failed":  # failed on a property of the exercise, not on how it was launched
        assert any(not c["passed"] and not c["could_not_judge"] for c in out["checks"]), out


@pytest.mark.slow
@pytest.mark.parametrize("slug", SCRIPT_EXERCISES)
def test_the_reference_solution_never_fails(bundles, slug):
    rc, out = selfcheck(bundles["reference"], slug)
    failed = [c for c in out["checks"] if not c["passed"] and not c["could_not_judge"]]
    assert not failed, failed
    assert (rc, out["status"]) in ((0, "passed"), (3, "could not judge")), out
