"""Design scenarios (``exercises/<slug>/exercise.toml`` with ``kind = "scenario"``): a brief, a
constraints document and reference data, scored by an interviewer against a rubric. There is no
script to run and nothing to grade automatically; the manifest says what the candidate is handed
and which rubric scores it.

A script exercise's manifest has no ``kind`` (or ``kind = "script"``): :func:`manifest_kind` reads
the field alone, so the exercise loader can send each folder to the right model.

A scenario hands the candidate its own answer template, ``DIAGNOSIS.md`` in the folder: the file a
workspace keeps (the sessions' store captures it, the debrief shows it) under the name every
workspace uses, with the sections of a design interview (:data:`ANSWER_SECTIONS`) instead of the
debugging one's symptom, root cause and fix. Its prompts speak to the scenario; its headings are
checked here. The scenario's follow-up questions live in its bank alone
(``rubrics/followups/<slug>.toml``): the interviewer's view lists a rubric's questions with the
bank's, so a design rubric carrying its own listed each of them twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from grader.errors import ManifestError
from grader.files import read_toml
from grader.manifest import MANIFEST, describe_validation_error
from grader.sessions.workspace import DIAGNOSIS

FORMAT_VERSION = 1
RUBRIC_FORMAT_VERSION = 2  # the rubric format agreed with interview sessions (dimension tree, feedback round)
ANSWER = DIAGNOSIS  # the file every workspace keeps and the store captures
REQUIRED_FILES = ("BRIEF.md", "CONSTRAINTS.md", ANSWER)
# The answer template's second-level headings, in order: what a design interview asks for.
ANSWER_SECTIONS = ("Requirements", "Proposal", "Parallelism and memory plan", "Communication", "Fault tolerance",
                   "Cost", "Risks", "What changes if the requirements change")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Reference(_Strict):
    title: str = Field(min_length=1)
    url: str = Field(min_length=1)


class ScenarioManifest(_Strict):
    format_version: int
    kind: Literal["scenario"]
    slug: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str = Field(min_length=1)
    summary: str = Field(min_length=1, description="one line: the situation, as `trainwreck list` shows it")
    difficulty: Literal["easy", "medium", "hard"]
    minutes: int = Field(gt=0, description="the candidate's time budget, feedback round excluded")
    topics: list[str] = Field(min_length=1)
    rubric: str = Field(pattern=r"^[a-z][a-z0-9_-]*$", description="rubrics/<rubric>.toml")
    deliverable: str = Field(min_length=1, description="one line: what the candidate hands in")
    files: list[str] = Field(min_length=1, description="what the candidate is handed, relative to the folder")
    references: list[Reference] = []

    @field_validator("format_version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v != FORMAT_VERSION:
            raise ValueError(f"unsupported format_version {v}; this trainwreck reads {FORMAT_VERSION}")
        return v

    @field_validator("summary", "deliverable")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if "\n" in v.strip():
            raise ValueError("must be one line")
        return v.strip()

    @field_validator("files")
    @classmethod
    def _files(cls, v: list[str]) -> list[str]:
        for f in v:
            p = PurePosixPath(f)
            if p.is_absolute() or ".." in p.parts or not f.strip():
                raise ValueError(f"{f!r} must be a path inside the scenario folder, e.g. \"data/prices.csv\"")
        if len(set(v)) != len(v):
            raise ValueError("list each file once")
        missing = [r for r in REQUIRED_FILES if r not in v]
        if missing:
            raise ValueError(f"must include {', '.join(missing)}")
        return v

    @property
    def symptom(self) -> str:
        """The one-line column `trainwreck list` shows for every exercise."""
        return self.summary


@dataclass(frozen=True)
class Scenario:
    manifest: ScenarioManifest
    dir: Path  # exercises/<slug>
    solution_dir: Path  # solutions/<slug>: NOTES.md for the interviewer

    @property
    def slug(self) -> str:
        return self.manifest.slug

    @property
    def kind(self) -> Literal["scenario"]:
        return "scenario"

    @property
    def brief(self) -> Path:
        return self.dir / "BRIEF.md"

    @property
    def notes(self) -> Path:
        return self.solution_dir / "NOTES.md"

    def rubric_path(self, root: Path | None = None) -> Path:
        return _root(root) / "rubrics" / f"{self.manifest.rubric}.toml"


def _root(root: Path | None) -> Path:
    from grader.exercises import kit_root

    return root or kit_root()


def _read(path: Path) -> dict:
    if not path.exists():
        raise ManifestError(f"{path}: not found; each exercise folder needs an {MANIFEST}")
    return read_toml(path, ManifestError)


def manifest_kind(path: Path) -> str:
    """``"scenario"`` or ``"script"`` (no ``kind`` field), from the manifest file or its folder."""
    path = Path(path)
    path = path / MANIFEST if path.is_dir() else path
    kind = _read(path).get("kind", "script")
    if kind not in ("script", "scenario"):
        raise ManifestError(f"{path}: kind: {kind!r} is unknown; use \"scenario\" or leave it out for a script "
                            "exercise")
    return kind


def load_scenario(path: Path, root: Path | None = None) -> Scenario:
    path = Path(path)
    path = path / MANIFEST if path.is_dir() else path
    try:
        m = ScenarioManifest.model_validate(_read(path))
    except ValidationError as e:
        raise ManifestError(describe_validation_error(path, e)) from None
    folder = path.parent
    if m.slug != folder.name:
        raise ManifestError(f"{path}: slug: {m.slug!r} differs from its folder {folder.name!r}; make them the same")
    for f in m.files:
        if not (folder / f).is_file():
            raise ManifestError(f"{path}: files: {f!r} is not a file in {folder}; list files that exist")
    data = folder / "data"
    unlisted = sorted(str(p.relative_to(folder)) for p in data.rglob("*") if p.is_file()) if data.is_dir() else []
    unlisted = [f for f in unlisted if f not in m.files]
    if unlisted:
        raise ManifestError(f"{path}: files: {unlisted[0]!r} is in the folder but not listed; list it, so the "
                            "candidate is handed it")
    check_answer_template(folder / ANSWER)
    rubric = _root(root) / "rubrics" / f"{m.rubric}.toml"
    _check_rubric_header(path, rubric, m.rubric)
    return Scenario(manifest=m, dir=folder, solution_dir=_root(root) / "solutions" / m.slug)


def _check_rubric_header(manifest: Path, rubric: Path, rubric_id: str) -> None:
    """The rubric exists and is the one named; its full shape is the rubric loader's to check."""
    if not rubric.is_file():
        raise ManifestError(f"{manifest}: rubric: {rubric} does not exist; write it or name an existing rubric")
    head = read_toml(rubric, ManifestError)
    if head.get("id") != rubric_id:
        raise ManifestError(f"{rubric}: id: {head.get('id')!r} is not {rubric_id!r}; make it the file's name")
    if head.get("format_version") != RUBRIC_FORMAT_VERSION:
        raise ManifestError(f"{rubric}: format_version: {head.get('format_version')!r} is not {RUBRIC_FORMAT_VERSION}; "
                            f"a scenario's rubric is format {RUBRIC_FORMAT_VERSION} (a dimension tree and a feedback round)")
    if head.get("followups"):
        raise ManifestError(f"{rubric}: followups: a scenario's questions belong in rubrics/followups/<slug>.toml "
                            "alone (the interviewer's view lists both); move them there")


def answer_sections(text: str) -> list[str]:
    """The second-level headings of a Markdown answer, in order (fenced blocks skipped)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            out.append(line[3:].strip())
    return out


def check_answer_template(path: Path) -> None:
    """The scenario's answer template has the design sections, each once, in order."""
    found = answer_sections(path.read_text(encoding="utf-8"))
    if found == list(ANSWER_SECTIONS):
        return
    missing = [s for s in ANSWER_SECTIONS if s not in found]
    extra = [s for s in found if s not in ANSWER_SECTIONS]
    if missing:
        problem = f"no section '## {missing[0]}'"
    elif extra:
        problem = f"section '## {extra[0]}' is not one of the design sections"
    else:
        problem = "the sections are out of order or repeated"
    raise ManifestError(f"{path}: {problem}; its ## headings must be, in order: {', '.join(ANSWER_SECTIONS)}")
