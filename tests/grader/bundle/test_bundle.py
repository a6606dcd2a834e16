"""The candidate bundle: everything listed is allowed, nothing of solutions, hints, notes, rubrics,
manifests or compute bounds is in it, and its self-check runs on its own."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from grader.bundle.build import SELF_CHECKS, build
from grader.exercises import find, kit_root
from grader.rubric import load_all

SLUGS = ["memory-leak", "sampler-replay", "slow-input-pipeline"]


def forbidden_strings() -> list[str]:
    out = []
    for s in SLUGS:
        out += [h[:50] for h in find(s).manifest.hints]
    for r in load_all():
        out += [r.summary.strip()[:50], r.feedback.strength_prompt[:50]]
        out += [d.question[:50] for d, _, _ in r.walk()] + [f.question[:50] for f in r.followups]
    for notes in (kit_root() / "solutions").glob("*/NOTES.md"):
        out += [line[:50] for line in notes.read_text().splitlines() if len(line) > 40][:5]
    return out


def check_listing(root: Path, listing: list[str]) -> None:
    solution_files = {p.read_bytes() for p in (kit_root() / "solutions").rglob("*") if p.is_file()}
    assert "selfcheck.py" in listing and "run.py" in listing and "harness/launch.py" in listing
    for s in SLUGS:
        assert {f"exercises/{s}/BRIEF.md", f"exercises/{s}/train.py", f"exercises/{s}/baseline.json",
                f"exercises/{s}/DIAGNOSIS.md"} <= set(listing)
        assert any(f.startswith(f"exercises/{s}/logs/") for f in listing)
    for rel in listing:
        parts = Path(rel).parts
        assert not {"solutions", "rubrics", "NOTES.md", "exercise.toml", "bound.py"} & set(parts), rel
        # the checks that compare with the reference stay out (the self-check's own are in)
        assert not (parts[0] == "grader" and parts[-1] in (
            "rubric.py", "grade.py", "matches_reference.py", "checkpoint_fresh.py", "trajectory.py",
            "outputs_match.py")), rel
        assert rel != "grader/checks/throughput.py", rel
        data = (root / rel).read_bytes()
        assert data not in solution_files, f"{rel} is a solution file"
        text = data.decode(errors="replace")
        for needle in forbidden_strings():
            assert needle not in text, f"{rel} holds {needle!r}"
    spec = json.loads((root / "selfcheck.json").read_text())["exercises"]
    for s in SLUGS:
        assert {c["name"] for c in spec[s]["checks"]} <= set(SELF_CHECKS)
    # the pass bar against the broken script ships; the reference's own speedup does not
    assert "target_speedup" not in json.dumps(spec) and "max_level_over_reference\": 1" not in json.dumps(spec)


@pytest.mark.slow
def test_bundle_folder_holds_only_what_a_candidate_may_see(tmp_path):
    res = build(SLUGS, tmp_path / "b")
    listing = sorted(str(p.relative_to(tmp_path / "b")) for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert listing == res.listing
    check_listing(tmp_path / "b", listing)


@pytest.mark.slow
def test_bundle_archive(tmp_path):
    res = build(SLUGS, tmp_path / "cand.tar.gz")
    with tarfile.open(res.path) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
        tar.extractall(tmp_path / "x", filter="data")
    assert all(n.startswith("cand/") for n in names)
    check_listing(tmp_path / "x" / "cand", sorted(n.removeprefix("cand/") for n in names))
    assert not list(tmp_path.glob("bundle-*"))  # the staging folder is gone


def test_a_design_scenario_keeps_its_own_answer_template(tmp_path):
    build(["cost-efficiency", "memory-leak"], tmp_path / "b")
    design = (tmp_path / "b" / "exercises" / "cost-efficiency" / "DIAGNOSIS.md").read_text()
    assert design.startswith("# Design:") and "## Root cause" not in design
    assert "## Root cause" in (tmp_path / "b" / "exercises" / "memory-leak" / "DIAGNOSIS.md").read_text()


def test_bundle_refuses_an_occupied_folder(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("mine")
    with pytest.raises(Exception, match="already exists and is not empty"):
        build(["memory-leak"], tmp_path / "b")


@pytest.mark.slow
def test_self_check_runs_from_the_bundle_alone(tmp_path):
    build(["memory-leak"], tmp_path / "b")
    p = subprocess.run([sys.executable, "selfcheck.py", "memory-leak", "--json"], cwd=tmp_path / "b",
                       capture_output=True, text=True, timeout=170)
    out = json.loads(p.stdout)
    assert p.returncode == 1, p.stderr[-2000:]
    verdicts = {c["name"]: c["passed"] for c in out["checks"]}
    assert verdicts == {"completes": True, "memory_flat": False, "workload_intact": True, "checkpoint_valid": True}
    assert out["run_dir"].startswith(str(tmp_path / "b" / "runs"))
