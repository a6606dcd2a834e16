"""The interviewer's follow-up questions (``rubrics/followups/<slug>.toml``, ``format_version = 1``):
one bank per exercise and per scenario, each question with the shape of a strong answer and what a
weak answer misses. A question may be keyed to the grader's evidence (``when``: shown when a check
passed or failed); the rest are always shown.

Sessions show a bank in the interviewer's view and the debrief: :func:`load_bank` for one slug,
:func:`select` for the questions a result's check verdicts call for.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from grader.errors import ManifestError
from grader.files import read_toml
from grader.manifest import MANIFEST, describe_validation_error

FORMAT_VERSION = 1
# The staff-level themes every bank draws from, and "exercise" for questions about that exercise only.
THEMES = {
    "resume-correctness": "how do you know a resumed run is correct",
    "world-size-change": "what breaks when the world size changes on resume",
    "periodic-slowdown": "how to debug a job that is slow only every N minutes",
    "silent-failure": "the most dangerous silent failure",
    "ddp-vs-fsdp": "DDP against FSDP (and ZeRO)",
    "checkpoint-economics": "checkpoint frequency as economics",
    "redesign-vs-tune": "when to redesign instead of tune",
    "not-build": "what you would deliberately not build",
    "exercise": "specific to this exercise",
}


class QuestionBankError(ManifestError):
    """One line: ``<file>: <field>: <problem>; <fix>``."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class When(_Strict):
    check: str = Field(min_length=1)
    passed: bool


class Followup(_Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    theme: str
    question: str = Field(min_length=1)
    strong_answer: str = Field(min_length=1)
    weak_answer: str = Field(min_length=1, description="what a weak answer misses")
    when: When | None = None

    @model_validator(mode="after")
    def _theme(self) -> Followup:
        if self.theme not in THEMES:
            raise ValueError(f"theme {self.theme!r} is unknown; use one of {', '.join(THEMES)}")
        return self


class Bank(_Strict):
    format_version: int
    exercise: str
    followups: list[Followup] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Bank:
        if self.format_version != FORMAT_VERSION:
            raise ValueError(f"format_version {self.format_version} is not {FORMAT_VERSION}; write {FORMAT_VERSION}")
        ids = [f.id for f in self.followups]
        dup = next((i for i in ids if ids.count(i) > 1), None)
        if dup:
            raise ValueError(f"id {dup!r} is used twice; give each question its own id")
        return self


def _root(root: Path | None) -> Path:
    from grader.exercises import kit_root

    return root or kit_root()


def bank_dir(root: Path | None = None) -> Path:
    return _root(root) / "rubrics" / "followups"


def _exercise_checks(root: Path, slug: str, path: Path) -> set[str] | None:
    """The check names a ``when`` may use: the script exercise's checks (and throughput); None for a
    scenario, which has no automatic evidence."""
    from grader.scenario import manifest_kind

    folder = root / "exercises" / slug
    if not (folder / MANIFEST).is_file():
        raise QuestionBankError(f"{path}: exercise: no exercise {slug!r} in {folder.parent}; name the file after "
                                "an exercise or scenario folder")
    if manifest_kind(folder) == "scenario":
        return None
    manifest = read_toml(folder / MANIFEST, QuestionBankError)
    names = {c.get("name") for c in manifest.get("checks", [])}
    return names | ({"throughput"} if "throughput" in manifest else set())


def load_bank(slug: str, root: Path | None = None) -> Bank:
    root = _root(root)
    path = bank_dir(root) / f"{slug}.toml"
    if not path.exists():
        raise QuestionBankError(f"{path}: not found; write the follow-up bank for {slug!r}")
    data = read_toml(path, QuestionBankError)
    try:
        bank = Bank.model_validate(data)
    except ValidationError as e:
        raise QuestionBankError(describe_validation_error(path, e)) from None
    if bank.exercise != slug:
        raise QuestionBankError(f"{path}: exercise: {bank.exercise!r} is not {slug!r}; make it the file's name")
    checks = _exercise_checks(root, slug, path)
    for k, f in enumerate(bank.followups):
        if f.when is None:
            continue
        if checks is None:
            raise QuestionBankError(f"{path}: followups[{k}].when: a scenario has no automatic evidence; remove "
                                    "`when` so the question is always shown")
        if f.when.check not in checks:
            raise QuestionBankError(f"{path}: followups[{k}].when.check: {slug} has no check {f.when.check!r}; use "
                                    f"one of {', '.join(sorted(checks))}")
    return bank


def load_all(root: Path | None = None) -> dict[str, Bank]:
    return {p.stem: load_bank(p.stem, root) for p in sorted(bank_dir(root).glob("*.toml"))}


def select(bank: Bank, verdicts: dict[str, bool] | None = None) -> list[Followup]:
    """The questions to show: every one without ``when``, and those whose check's verdict matches.

    ``verdicts`` maps check names to passed (from a result.json's checks); without verdicts (a
    scenario, or before any grading) only the unconditional questions are returned."""
    verdicts = verdicts or {}
    return [f for f in bank.followups if f.when is None or verdicts.get(f.when.check) == f.when.passed]
