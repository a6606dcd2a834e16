"""result.json: the hand-off from grading to reports, sessions and regrade (``schema_version`` 1).

One typed object, ``GradeResult``, with one JSON form: what ``grade`` writes, what ``--json``
prints, what the console and ``verify`` read, and what the session store keeps. A result written
before a field existed still reads (the field takes its default)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from grader.checks.base import CheckResult
from grader.errors import EXIT_FAIL, EXIT_OK, EXIT_USAGE, UserError
from grader.scoring import IssueVerdict, Score
from harness.rundir import atomic_write_json

SCHEMA_VERSION = 1


class SubmissionInfo(BaseModel):
    model_config = ConfigDict(extra="ignore")

    kind: str  # workspace | solution | broken
    source: str = ""
    sha256: str = ""  # of the editable files, in manifest order
    protected_changed: list[str] = []


class Flag(BaseModel):
    """Something the submission touched that a fix has no reason to (``grader.flags``): for the
    interviewer to read; never a verdict by itself."""

    model_config = ConfigDict(extra="ignore")

    kind: str  # source | tampering | stray | trap | limit | sealed | fault | behaviour | disagree
    what: str  # one line, candidate text made printable
    run: str | None = None  # the run it was seen in (tampering, stray, trap, limit)
    where: str | None = None  # file:line of the submission (source)

    def line(self) -> str:
        at = f" ({self.where})" if self.where else f" (in the {self.run} run)" if self.run else ""
        return f"{self.kind}: {self.what}{at}"


class Isolation(BaseModel):
    """How the candidate's code ran: ``sandbox`` (bubblewrap, ``mode`` setuid or userns, the run's
    ``uid``) or ``none`` (unisolated, with the reason)."""

    model_config = ConfigDict(extra="ignore")

    kind: str  # sandbox | none
    reason: str | None = None
    mode: str | None = None
    uid: int | None = None

    @property
    def sandboxed(self) -> bool:
        return self.kind == "sandbox"

    def line(self) -> str:
        if self.sandboxed:
            return f"isolation: sandbox (bubblewrap, {self.mode} mode" + \
                (f", uid {self.uid})" if self.uid is not None else ")")
        return f"isolation: NONE, the candidate's code ran unisolated ({self.reason})"


class GradeResult(BaseModel):
    model_config = ConfigDict(extra="ignore")

    schema_version: int = SCHEMA_VERSION
    exercise: str
    graded_at: str = ""
    regraded_at: str | None = None
    submission: SubmissionInfo
    passed: bool
    score: float
    environment_failure: bool = False
    failed_required: list[str] = []
    issues: list[IssueVerdict] = []  # per-issue verdicts; empty unless the manifest groups checks
    checks: list[CheckResult] = []
    # the throughput check's figures (also its evidence), for readers that want them at the top
    throughput: dict[str, Any] | None = None
    measurements: dict[str, Any] = {}  # what checks measured with runs of their own (throughput rounds)
    environment: dict[str, Any] = {}
    timings: dict[str, float] = {}
    run_dirs: dict[str, str] = {}
    out_dir: str = ""
    # how the candidate's code ran; None in a result written before the sandbox existed
    isolation: Isolation | None = None
    flags: list[Flag] = []  # for a human to read: what the submission touched (grader.flags)
    sealed: bool = False  # the run dirs were sealed (grader.sealing): regrade verifies them

    @property
    def exit_code(self) -> int:
        if self.environment_failure:
            return EXIT_USAGE
        return EXIT_OK if self.passed else EXIT_FAIL

    @property
    def result_path(self) -> Path:
        return Path(self.out_dir) / "result.json"

    def check(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    def with_verdict(self, checks: list[CheckResult], s: Score) -> GradeResult:
        tp = next((c for c in checks if c.name == "throughput"), None)
        return self.model_copy(update={
            "passed": s.passed, "score": s.score, "environment_failure": s.environment_failure,
            "failed_required": s.gate, "issues": s.issues, "checks": checks,
            "throughput": tp.evidence if tp else None})

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def write(self, path: Path | None = None) -> Path:
        path = Path(path) if path else self.result_path
        atomic_write_json(path, self.to_json())
        return path

    @classmethod
    def read(cls, path: Path) -> GradeResult:
        path = Path(path)
        if path.is_dir():
            path = path / "result.json"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise UserError(f"{path}: not found; give a result.json written by `trainwreck grade`") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"{path}: not valid JSON ({e}); give a result.json written by `trainwreck grade`") from None
        if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
            version = data.get("schema_version") if isinstance(data, dict) else None
            raise UserError(f"{path}: schema_version {version!r}; this trainwreck reads {SCHEMA_VERSION}")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            raise UserError(f"{path}: {where}: {err['msg']}; give a result.json written by `trainwreck grade`") from None
