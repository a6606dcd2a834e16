"""Typed rows of the session store. Times are ISO 8601 strings in UTC (what SQLite stores)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from grader.attempts import Attempt as Attempt  # the one attempt model (practice's too), importable from here

REVISION_OUTCOMES = ("improved", "partly", "unchanged", "worse", "not-attempted")
RECOMMENDATIONS = ("strong-no", "no", "yes", "strong-yes")  # an interviewer's hire recommendation
ANSWER_POLICIES = ("record", "refuse")  # what an open session does when its answers are asked for
NOT_GIVEN = "not given"  # how a sheet without a recommendation (one saved before they existed) shows


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def parse_time(s: str) -> datetime:
    return datetime.fromisoformat(s)


@dataclass(frozen=True)
class Session:
    id: str
    candidate: str
    created_at: str
    started_at: str
    minutes: int
    root: str  # the folder holding one workspace per exercise
    closed_at: str | None = None
    answers: str = "record"  # one of ANSWER_POLICIES: hints and the reference, recorded or refused

    @property
    def closed(self) -> bool:
        return self.closed_at is not None

    def elapsed_s(self, at: datetime | None = None) -> float:
        end = parse_time(self.closed_at) if self.closed_at else (at or datetime.now(UTC))
        return max((end - parse_time(self.started_at)).total_seconds(), 0.0)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "elapsed_s": round(self.elapsed_s(), 1)}


@dataclass(frozen=True)
class SessionExercise:
    session_id: str
    slug: str
    position: int
    workspace: str
    rubric_id: str
    graded: bool  # False: a scenario scored by the interviewer alone, no attempts
    title: str = ""
    diagnosis: str | None = None  # the candidate's DIAGNOSIS.md, as last captured
    diagnosis_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Reveal:
    """A kit command that shows an answer (a hint, the reference diff, its notes), run while the
    session was open: recorded whether it was shown or refused."""

    session_id: str
    slug: str
    at: str
    what: str  # "hint 2 of 4", "the reference diff", "the reference notes"
    outcome: str  # shown | refused
    place: str  # the folder the command ran in

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DimensionScore:
    dimension: str
    level: int  # 0: not scored (a note alone, or a parent's note)
    note: str = ""


@dataclass(frozen=True)
class FeedbackRound:
    strength: str = ""
    improvement: str = ""
    revision_outcome: str | None = None  # one of REVISION_OUTCOMES
    revision_notes: str = ""
    notes: str = ""  # the interviewer's overall notes
    followups_asked: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Recommendation:
    """An interviewer's overall call on the candidate, and why (the reason is required)."""

    verdict: str  # one of RECOMMENDATIONS
    reason: str

    @property
    def words(self) -> str:
        return self.verdict.replace("-", " ")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def recommendation_words(rec: Recommendation | None) -> str:
    return rec.words if rec else NOT_GIVEN


@dataclass(frozen=True)
class SheetDeletion:
    """A score sheet taken out of a session: who deleted whose sheet, when, and what it held."""

    session_id: str
    slug: str
    interviewer: str
    deleted_at: str
    sheet: dict[str, Any]  # the sheet as it was (ScoreSheet.to_json())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ScoreSheet:
    """One interviewer's scores of one exercise of a session."""

    session_id: str
    slug: str
    interviewer: str
    levels: dict[str, DimensionScore]
    feedback: FeedbackRound
    updated_at: str | None = None
    recommendation: Recommendation | None = None  # None: saved before recommendations existed

    @property
    def recommendation_words(self) -> str:
        return recommendation_words(self.recommendation)

    def level_map(self) -> dict[str, int]:
        return {k: v.level for k, v in self.levels.items() if v.level}

    def to_json(self) -> dict[str, Any]:
        return {"interviewer": self.interviewer, "exercise": self.slug, "updated_at": self.updated_at,
                "levels": self.level_map(), "notes": {k: v.note for k, v in self.levels.items() if v.note},
                "feedback": self.feedback.to_json(),
                "recommendation": self.recommendation.to_json() if self.recommendation else None}


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
