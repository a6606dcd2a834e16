"""The check registry is built from the check modules: every module in grader/checks/ declares one
check named after its file, and the manifest's check names and the grading plan come from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.checks import CHECK_NAMES, REGISTRY
from grader.exercises import discover
from grader.grade import plan
from grader.manifest import Manifest
from grader.roles import Role

CHECKS_DIR = Path(__file__).resolve().parents[2] / "grader" / "checks"
MODULES = sorted(p.stem for p in CHECKS_DIR.glob("*.py") if p.stem != "base" and not p.stem.startswith("_"))


def test_every_check_module_is_registered_under_its_file_name():
    assert list(CHECK_NAMES) == MODULES
    for name, check in REGISTRY.items():
        assert check.name == name and check.spec.model_fields["name"].annotation.__args__ == (name,)


def test_every_check_has_a_test_file_of_its_own():
    tests = {p.stem.removeprefix("test_") for p in (Path(__file__).parent / "checks").glob("test_*.py")}
    assert set(MODULES) <= tests, set(MODULES) - tests


def test_every_check_names_the_one_property_it_judges():
    """The validity table (docs/validity.md) shows it beside the check's verdicts."""
    missing = [n for n, c in REGISTRY.items() if len(c.property) < 20]
    assert not missing, f"checks without a property: {missing}"


def test_the_manifest_accepts_exactly_the_registered_checks():
    union = Manifest.model_fields["checks"].annotation.__args__[0]
    names = {t.model_fields["name"].annotation.__args__[0] for t in union.__origin__.__args__}
    assert names == set(CHECK_NAMES)


@pytest.mark.parametrize("slug, runs, reference", [
    ("memory-leak", ["main"], True),
    ("lr-scaling", ["main", "ws1"], True),
    ("sampler-replay", ["main", "resume"], False),  # a resume is judged against its own uninterrupted run
    ("checkpoint-resume", ["main", "resume", "resume_save"], False),
    ("periodic-stall", ["main"], True),
])
def test_the_plan_is_the_union_of_what_the_checks_declare(slug, runs, reference):
    ex = next(e for e in discover()[0] if e.slug == slug)
    p = plan(ex.manifest)
    assert list(p.runs) == runs and p.reference is reference
    assert p.runs["main"].role is Role.MAIN and p.runs["main"].nproc == ex.manifest.world_size


def test_a_run_two_checks_ask_for_keeps_the_first_launch_and_merges_the_environment():
    ex = next(e for e in discover()[0] if e.slug == "periodic-stall")
    assert dict(plan(ex.manifest).runs["main"].env) == {"TRAINWRECK_FINGERPRINT": "1"}


@pytest.mark.parametrize("slug, watched", [
    ("periodic-stall", ("out/ckpt.pt",)),  # checkpoint_fresh's file, watched from outside in the main run
    ("memory-leak", ()),
])
def test_the_main_run_watches_the_files_the_checks_ask_for(slug, watched):
    ex = next(e for e in discover()[0] if e.slug == slug)
    main = plan(ex.manifest).runs["main"]
    assert main.watch == watched and main.launch_settings()["watch"] == list(watched)
