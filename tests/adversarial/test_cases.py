"""The suite's own checks, fast (no grading): every case is well formed, its hostile script
compiles, and the table covers what issue 11 asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.exercises import find_script, kit_root
from tests.adversarial import cases
from tests.adversarial.cases import CASES, SLUGS, compose


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_hostile_script_compiles(case, tmp_path):
    ws = cases.workspace(case, kit_root(), tmp_path / "ws") if case.prepare is None else None
    script = (ws / "train.py").read_text() if ws else case.script(kit_root())
    compile(script, f"{case.id}/train.py", "exec")
    assert case.base in ("broken", "solution")
    assert case.expect.check is not None or case.expect.refused
    assert case.limit_s > 0 and case.klass in SLUGS
    find_script(case.exercise)


def test_every_attack_file_is_used():
    used = {name for c in CASES for name in (*cases.PRELUDE, *c.attack)}
    files = {p.stem for p in cases.ATTACKS.glob("*.py")}
    assert files == used, f"unused: {files - used}, missing: {used - files}"


def test_the_suite_covers_the_issue():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len({c.exercise for c in CASES}) >= 3
    assert set(SLUGS) == {c.klass for c in CASES}
    # issue 25's classes: held records, faults removed, internals by computed names, roles told apart,
    # claims of another rank, attempt or time, collectives claimed that never crossed the wire
    assert {"hold-records-stall", "hold-records-leak", "disarm-kill", "walk-objects", "decoy-takes-the-kill",
            "computed-names", "fix-when-graded", "fast-when-timed", "restart-role-tricks", "child-claims-rank",
            "ahead-of-time", "forge-collectives"} <= set(ids)


def test_compose_refuses_a_script_it_cannot_splice():
    with pytest.raises(ValueError):
        compose("print('no main here')\n", ())


def test_the_destructive_attacks_stand_down_outside_a_sandbox():
    for c in CASES:
        if not c.unisolated_safe:
            text = "".join((cases.ATTACKS / f"{a}.py").read_text() for a in c.attack)
            assert "_contained()" in text, c.id


def test_readme_table_lists_every_case():
    readme = (Path(__file__).parent / "README.md").read_text()
    missing = [c.id for c in CASES if f"`{c.id}`" not in readme]
    assert not missing, f"README.md's table lacks {missing}"


def test_grade_one_writes_its_summary_where_told_whatever_the_flags(tmp_path):
    from tests.adversarial import grade_one

    summary = tmp_path / "summary.json"
    grade_one.main(["grade", "no-such-exercise", str(tmp_path), str(tmp_path / "out"), "--no-throughput",
                    str(summary), "--sandbox"])
    data = __import__("json").loads(summary.read_text())
    assert data["outcome"] == "refused" and "no-such-exercise" in data["error"]


def test_cis_tier_has_a_case_of_every_class_and_stays_short():
    ci = [c for c in CASES if c.ci]
    assert {c.klass for c in ci} == set(SLUGS)  # an attack that once failed cannot come back unseen
    # issue 25's defences: the environment a role sees, faults from outside, records held back
    assert {"fix-when-graded", "disarm-kill", "hold-records-leak"} <= {c.id for c in ci}
    # about 50 s a case with its honest grading; no throughput rounds (minutes each)
    assert len(ci) <= 12 and all(c.exercise not in ("slow-input-pipeline", "periodic-stall") for c in ci)
