"""``trainwreck verify``: the kit's self-check (rustlings' `dev check`). For each exercise: the
folder is complete, the broken script fails the checks its manifest says it must (and, where the
manifest groups its checks into issues, fixes none of them), the reference passes every check, and
the recorded logs and baseline come from the current broken script."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.exercises import Exercise
from grader.grade import GradeOptions, grade
from grader.record import BASELINE, LOGS, load_baseline, script_sha256
from grader.result import GradeResult
from harness.executor import Executor, Sandboxed


@dataclass
class Verification:
    slug: str
    problems: list[str] = field(default_factory=list)
    broken: GradeResult | None = None
    solution: GradeResult | None = None

    @classmethod
    def unloadable(cls, error: str) -> Verification:
        """An exercise whose manifest does not load (``error`` is the loader's one line)."""
        return cls(slug=Path(error.split(":")[0]).parent.name or error.split(":")[0], problems=[error])

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def broken_failed(self) -> list[str]:
        return [c.name for c in (self.broken.checks if self.broken else []) if not c.passed]

    def to_json(self) -> dict[str, Any]:
        return {"slug": self.slug, "ok": self.ok, "problems": self.problems,
                "broken_failed": self.broken_failed,
                "solution_score": self.solution.score if self.solution else None,
                **({"issues": {role: _fixed_count(res) for role, res in
                               (("broken", self.broken), ("solution", self.solution))}}
                   if self.solution and self.solution.issues else {})}


def static_problems(ex: Exercise) -> list[str]:
    m, problems = ex.manifest, []
    if not ex.brief.is_file():
        problems.append(f"{ex.dir}/BRIEF.md is missing")
    if not ex.solution_dir.is_dir():
        problems.append(f"no reference solution at {ex.solution_dir}")
        return problems
    for f in m.editable:
        if not (ex.solution_dir / f).is_file():
            problems.append(f"the solution lacks {f} (it must have the exercise's editable file names)")
    if not (ex.solution_dir / "NOTES.md").is_file():
        problems.append(f"{ex.solution_dir}/NOTES.md is missing")
    baseline = load_baseline(ex)
    if baseline is None or not (ex.dir / LOGS).is_dir():
        problems.append(f"no recorded {LOGS}/ and {BASELINE}; run `trainwreck record {m.slug}`")
    elif baseline.get("script_sha256") != script_sha256(ex):
        problems.append(f"{BASELINE} was recorded from another version of {m.entry}; "
                        f"run `trainwreck record {m.slug}`")
    return problems


def verify(ex: Exercise, out_dir: Path, device: str = "auto", progress=lambda s: None,
           executor: Executor = Sandboxed()) -> Verification:
    v = Verification(ex.slug, static_problems(ex))
    if not ex.solution_dir.is_dir():
        return v
    # The solution first: its run is the reference the broken grading compares with.
    progress(f"{ex.slug}: grading the reference solution")
    v.solution = grade(ex, GradeOptions(kind="solution", out_dir=out_dir / "solution", device=device,
                                        executor=executor), progress)
    if v.solution.environment_failure:
        v.problems.append("grading the solution hit an environment failure: "
                          + _first_failed(v.solution))
    elif not v.solution.passed or any(not c.passed for c in v.solution.checks):
        v.problems.append("the reference solution does not pass: " + _first_failed(v.solution))
    progress(f"{ex.slug}: grading the broken script")
    # The broken script must fail its checks; for throughput, one side-by-side round shows it is no
    # faster than itself (about 1x against a pass bar of 1 + half the target's gain): the full
    # protocol, warm-up and compute bound included, is for scoring fixes.
    v.broken = grade(ex, GradeOptions(kind="broken", out_dir=out_dir / "broken", device=device,
                                      quick_throughput=True, executor=executor), progress)
    failed = set(v.broken_failed)
    for name in ex.manifest.broken_fails:
        if name not in failed:
            msg = next((c.message for c in v.broken.checks if c.name == name), "not run")
            v.problems.append(f"the broken script passes {name}, which it must fail ({msg})")
    if v.broken.passed:
        v.problems.append("the broken script passes grading")
    v.problems += issue_problems(v.broken, v.solution)
    if v.broken.environment_failure:
        v.problems.append("grading the broken script hit an environment failure: " + _first_failed(v.broken))
    return v


def issue_problems(broken: GradeResult, solution: GradeResult) -> list[str]:
    """Where the manifest groups checks into issues: the broken script must leave every issue
    unfixed (each fails one of its checks) and the reference must fix every one."""
    problems = []
    for i in broken.issues:
        if i.fixed:
            problems.append(f"the broken script already fixes issue {i.name!r}: all its checks pass "
                            f"({', '.join(i.checks)})")
    for i in solution.issues:
        if not i.fixed:
            problems.append(f"the reference solution does not fix issue {i.name!r}: it fails "
                            f"{', '.join(i.failed)}")
    return problems


def _fixed_count(res: GradeResult | None) -> str:
    issues = res.issues if res else []
    return f"{sum(i.fixed for i in issues)} of {len(issues)}"


def _first_failed(res: GradeResult) -> str:
    c = next((c for c in res.checks if not c.passed), None)
    return f"{c.name}: {c.message}" if c else "no check failed"
