"""Quantitative questions (``rubrics/quiz/*.toml``, ``format_version = 1``): the bank, the grading of
one answer, and the practice progress kept between sessions.

A question has one model answer with a unit and a stated tolerance, a derivation, and where one
applies the ``trainwreck calc`` invocation that reproduces it (the tests run it). Misconceptions
are wrong answers a known mistake produces (GiB for GB, bits for bytes, the optimizer state
forgotten, the other bubble definition); an answer that matches one gets feedback on that mistake
rather than a bare "wrong". ``depends_on`` names the questions whose result this one builds on, so
a mistake there cascades here.

Interview sessions call :func:`grade_answer`; ``trainwreck quiz`` is the practice front end.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from grader.errors import ManifestError
from grader.files import read_toml
from grader.manifest import describe_validation_error
from grader.tools import units

FORMAT_VERSION = 1
STATE_VERSION = 1
TOPICS = ("data-parallel", "communication", "pipeline-tensor", "memory-precision", "fault-tolerance-cost")
# labels that are not converted: an answer may repeat one or leave it out. "params" also reads 7B, 1.5T
LABELS = ("", "params", "tokens", "steps", "micro-batches", "GPUs", "USD")


class QuizError(ManifestError):
    """A question file, a state file or a selection that cannot be used: one line with the fix."""


class AnswerError(ValueError):
    """An answer that cannot be read as a number in the question's unit (ask again; not a wrong answer)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tolerance(_Strict):
    relative: float | None = Field(None, gt=0, lt=1)
    absolute: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one(self) -> Tolerance:
        if (self.relative is None) == (self.absolute is None):
            raise ValueError("give exactly one of relative (e.g. 0.01 for 1%) or absolute (in the answer's unit)")
        return self

    def accepts(self, given: float, expected: float) -> bool:
        if self.absolute is not None:
            bound = self.absolute
        else:
            assert self.relative is not None  # exactly one of the two is given (the validator above)
            bound = self.relative * abs(expected)
        return abs(given - expected) <= bound * (1 + 1e-9)

    def describe(self, unit: str) -> str:
        if self.absolute is not None:
            return f"±{self.absolute:g} {unit}".rstrip()
        return f"±{self.relative:.1%}"


class CalcCheck(_Strict):
    """``trainwreck calc <command> --json`` reproduces the figure: ``result[value]``, in ``unit``
    (left out: already in the question's unit)."""

    command: str = Field(min_length=1)
    value: str = Field(min_length=1)
    unit: str | None = None


class Misconception(_Strict):
    answer: float
    feedback: str = Field(min_length=1)
    calc: CalcCheck | None = None


class Question(_Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    topic: str = ""  # filled from the file
    question: str = Field(min_length=1)
    answer: float
    unit: str
    tolerance: Tolerance
    derivation: str = Field(min_length=1)
    calc: CalcCheck | None = None
    depends_on: list[str] = []
    misconceptions: list[Misconception] = []

    @model_validator(mode="after")
    def _consistent(self) -> Question:
        if self.unit not in LABELS and units.dimension_of(self.unit) is None:
            raise ValueError(f"unit {self.unit!r} is unknown; use a size (GB, GiB, MB), a rate (GB/s), a time "
                             f"(s, ms, min, h), % or one of the labels {list(LABELS)}")
        for m in self.misconceptions:
            if self.tolerance.accepts(m.answer, self.answer):
                raise ValueError(f"misconception answer {m.answer:g} is within the tolerance of the model answer "
                                 f"{self.answer:g}; tighten the tolerance or drop the misconception")
        return self


class QuizFile(_Strict):
    format_version: int
    topic: str
    title: str
    questions: list[Question] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> QuizFile:
        if self.format_version != FORMAT_VERSION:
            raise ValueError(f"format_version {self.format_version} is not {FORMAT_VERSION}; write {FORMAT_VERSION}")
        if self.topic not in TOPICS:
            raise ValueError(f"topic {self.topic!r} is unknown; use one of {', '.join(TOPICS)}")
        return self


def quiz_dir(root: Path | None = None) -> Path:
    from grader.exercises import kit_root

    return (root or kit_root()) / "rubrics" / "quiz"


def load_file(path: Path) -> list[Question]:
    data = read_toml(Path(path), QuizError)
    try:
        f = QuizFile.model_validate(data)
    except ValidationError as e:
        raise QuizError(describe_validation_error(path, e)) from None
    return [q.model_copy(update={"topic": f.topic}) for q in f.questions]


def load_bank(root: Path | None = None) -> list[Question]:
    """Every question of every file, in file order; ids unique and dependencies resolvable."""
    questions: list[Question] = []
    seen: dict[str, Path] = {}
    files = sorted(quiz_dir(root).glob("*.toml"))
    for path in files:
        for q in load_file(path):
            if q.id in seen:
                raise QuizError(f"{path}: questions.{q.id}: id already used in {seen[q.id].name}; give it another id")
            seen[q.id] = path
            questions.append(q)
    for q in questions:
        for d in q.depends_on:
            if d not in seen:
                raise QuizError(f"{seen[q.id]}: {q.id}.depends_on: no question {d!r}; name an existing id")
    return questions


def select(questions: list[Question], topic: str | None = None, ids: tuple[str, ...] = ()) -> list[Question]:
    if topic is not None and topic not in TOPICS:
        raise QuizError(f"no topic {topic!r}; use one of {', '.join(TOPICS)}")
    known = {q.id for q in questions}
    for i in ids:
        if i not in known:
            raise QuizError(f"no question {i!r}; see `trainwreck quiz --list` for the ids")
    return [q for q in questions if (topic is None or q.topic == topic) and (not ids or q.id in ids)]


@dataclass(frozen=True)
class Verdict:
    id: str
    correct: bool
    given: float  # in the question's unit
    expected: float
    unit: str
    tolerance: str
    relative_error: float | None
    feedback: str
    derivation: str
    misconception: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def read_answer(question: Question, value: float | str) -> float:
    """The answer as a number in the question's unit; a unit given with it is converted."""
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise AnswerError("give a finite number")
        return float(value)
    text = str(value).strip().replace(",", "")
    if text.startswith("$"):
        text = text[1:] + " USD"
    if question.unit == "params":
        try:
            return units.parse_count(text.removesuffix("params").strip())
        except units.UnitError as e:
            raise AnswerError(str(e)) from None
    m = re.fullmatch(r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*)", text)
    if not m:
        raise AnswerError(f"{value!r} is not a number; answer like 12.5" + (f" {question.unit}" if question.unit else ""))
    number, unit = float(m.group(1)), m.group(2).strip()
    if not unit or unit == question.unit:
        return number
    if question.unit in LABELS:
        raise AnswerError(f"this answer is in {question.unit or 'plain numbers'}; drop {unit!r}")
    try:
        return units.convert(number, unit, question.unit)
    except units.UnitError:
        raise AnswerError(f"{unit!r} cannot be expressed in {question.unit}; answer in {question.unit}") from None


def _hint(given: float, expected: float) -> str:
    """Name the factor when a wrong answer is off by one a unit mistake produces."""
    if given == 0 or expected == 0:
        return ""
    ratio = given / expected
    for factor, what in ((8, "bits against bytes"), (2**30 / 1e9, "GiB against GB"), (1024 / 1000, "a binary "
                         "against a decimal prefix"), (1000, "a unit prefix (k, M, G)"), (100, "percent against "
                         "fraction"), (60, "minutes against seconds or hours"), (3600, "hours against seconds"),
                         (2, "for a missing or extra factor of 2")):
        for r in (factor, 1 / factor):
            if abs(ratio / r - 1) < 0.01:
                return f"; off by a factor of {factor:g} exactly: check {what}"
    return ""


def grade_answer(question: Question, value: float | str) -> Verdict:
    """Grade one answer against the model answer with the question's tolerance. Pure: no state."""
    given = read_answer(question, value)
    expected = question.answer
    tol = question.tolerance.describe(question.unit)
    rel = abs(given - expected) / abs(expected) if expected else None
    if question.tolerance.accepts(given, expected):
        return Verdict(question.id, True, given, expected, question.unit, tol, rel,
                       f"correct: {expected:g} {question.unit} ({tol})".rstrip(), question.derivation, False)
    for m in question.misconceptions:
        if question.tolerance.accepts(given, m.answer):
            return Verdict(question.id, False, given, expected, question.unit, tol, rel,
                           f"not quite: {m.feedback}", question.derivation, True)
    direction = "high" if given > expected else "low"
    off = f"{rel:.0%} too {direction}" if rel is not None else f"too {direction}"
    return Verdict(question.id, False, given, expected, question.unit, tol, rel,
                   f"not within {tol} of the model answer: {off}{_hint(given, expected)}", question.derivation, False)


# ---- practice progress ---------------------------------------------------------------------------

class Progress(_Strict):
    attempts: int = Field(ge=0)
    solved: bool  # answered correctly at least once
    last_answer: str
    last_correct: bool
    updated: str


class QuizState(_Strict):
    format_version: int = STATE_VERSION
    questions: dict[str, Progress] = {}


def default_state_path() -> Path:
    from harness.defaults import user_home

    return user_home() / "quiz-state.json"


def load_state(path: Path) -> QuizState:
    path = Path(path)
    if not path.exists():
        return QuizState()
    try:
        state = QuizState.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, ValidationError, UnicodeDecodeError):
        raise QuizError(f"{path}: not a quiz state file; move it away or pass --state with another path") from None
    if state.format_version != STATE_VERSION:
        raise QuizError(f"{path}: format_version {state.format_version} is not {STATE_VERSION}; move it away")
    return state


def save_state(path: Path, state: QuizState) -> None:
    """Write-then-rename in the same directory: a crash leaves the old state or the new, never half."""
    from harness.rundir import atomic_write_json

    atomic_write_json(Path(path), state.model_dump())


def record(state: QuizState, verdict: Verdict, answer: str, now: datetime | None = None) -> QuizState:
    old = state.questions.get(verdict.id)
    when = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    p = Progress(attempts=(old.attempts if old else 0) + 1, solved=bool(old and old.solved) or verdict.correct,
                 last_answer=answer, last_correct=verdict.correct, updated=when)
    return state.model_copy(update={"questions": {**state.questions, verdict.id: p}})


def forget(state: QuizState, ids: list[str]) -> QuizState:
    return state.model_copy(update={"questions": {k: v for k, v in state.questions.items() if k not in ids}})
