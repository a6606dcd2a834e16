"""record keeps what it recorded safe; verify's static checks catch stale or missing artifacts."""

from __future__ import annotations

import json
import shutil

import pytest

from grader import record as record_mod
from grader.checks.base import CheckResult
from grader.exercises import find
from grader.result import GradeResult, SubmissionInfo
from grader.verify import static_problems
from tests.conftest import REPO


@pytest.fixture
def home(tmp_path, monkeypatch):
    for part in ("exercises", "solutions"):
        shutil.copytree(REPO / part / "memory-leak", tmp_path / part / "memory-leak")
    monkeypatch.setenv("TRAINWRECK_KIT", str(tmp_path))
    return tmp_path


def test_shipped_exercise_has_no_static_problems(home):
    assert static_problems(find("memory-leak")) == []


@pytest.mark.parametrize("damage, says", [
    (lambda h: (h / "exercises/memory-leak/train.py").write_text(
        (h / "exercises/memory-leak/train.py").read_text() + "\n# edited\n"), "recorded from another version"),
    (lambda h: (h / "exercises/memory-leak/baseline.json").unlink(), "run `trainwreck record memory-leak`"),
    (lambda h: (h / "exercises/memory-leak/BRIEF.md").unlink(), "BRIEF.md is missing"),
    (lambda h: (h / "solutions/memory-leak/NOTES.md").unlink(), "NOTES.md is missing"),
    (lambda h: shutil.rmtree(h / "solutions/memory-leak"), "no reference solution"),
])
def test_static_problems(home, damage, says):
    damage(home)
    problems = static_problems(find("memory-leak"))
    assert any(says in p for p in problems), problems


def test_failed_record_keeps_the_previous_logs_and_baseline(home, monkeypatch):
    ex = find("memory-leak")
    before = (ex.dir / "baseline.json").read_text(), sorted(p.name for p in (ex.dir / "logs").iterdir())

    def boom(*a, **k):
        raise RuntimeError("the machine broke mid-record")

    monkeypatch.setattr(record_mod, "run_role", boom)
    with pytest.raises(RuntimeError):
        record_mod.record(ex)
    assert (ex.dir / "baseline.json").read_text() == before[0]
    assert sorted(p.name for p in (ex.dir / "logs").iterdir()) == before[1]
    assert not list(ex.dir.glob(".logs*"))


@pytest.mark.slow
def test_record_writes_logs_and_a_baseline_from_telemetry(home):
    ex = find("memory-leak")
    (ex.dir / "logs").rename(ex.dir / "old-logs")
    b = record_mod.record(ex)
    assert b["status"] == "ok" and b["world_size"] == 2 and b["backend"] == "gloo"
    assert b["script_sha256"] == record_mod.script_sha256(ex)
    assert b["ranks"]["0"]["steps"] == 192 and b["ranks"]["0"]["memory_slope_mb_per_step"] > 0.5
    assert json.loads((ex.dir / "baseline.json").read_text()) == b
    assert "mem" in (ex.dir / "logs" / "rank0.stdout.log").read_text()
    metrics = (ex.dir / "logs" / "metrics.csv").read_text().splitlines()
    assert metrics[0].startswith("rank,attempt,step,time_s") and len(metrics) == 1 + 2 * 192
    assert static_problems(ex) == []


def test_verify_grades_the_reference_in_full_and_the_broken_script_quickly(home, monkeypatch):
    """The reference's throughput figure is the one fixes are scored against; the broken script
    only has to be shown no faster than itself."""
    import grader.verify as verify_mod

    seen = {}

    def fake_grade(ex, opts, progress):
        seen[opts.kind] = opts.quick_throughput
        failed = opts.kind == "broken"
        return GradeResult(exercise=ex.slug, submission=SubmissionInfo(kind=opts.kind), passed=not failed,
                           score=0.0 if failed else 1.0,
                           checks=[CheckResult(n, not failed, "m") for n in ex.manifest.broken_fails])

    monkeypatch.setattr(verify_mod, "grade", fake_grade)
    v = verify_mod.verify(find("memory-leak"), home / "out")
    assert seen == {"solution": False, "broken": True} and v.ok, v.problems
