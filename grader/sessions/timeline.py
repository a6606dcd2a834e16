"""Marks on an exercise's attempt timeline that a hiring committee weighs: an attempt made in
the feedback round's revision window (after the interviewer gave feedback, for the rubric's
``revision_minutes``) or after it, and a pass submitted after the session's time budget.

An attempt's time is when it was submitted (``started_at``: the grading snapshots the files then)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from grader.attempts import Attempt
from grader.sessions.models import Session, parse_time

REVISION = "revision window"
AFTER_REVISION = "after the revision window"
OVER_TIME = "passed over time"


@dataclass(frozen=True)
class Window:
    """The revision window: ``start`` (when the feedback round was given) for ``minutes``."""

    start: str
    minutes: int

    def contains(self, iso: str) -> bool:
        t, s = parse_time(iso), parse_time(self.start)
        return s <= t <= s + timedelta(minutes=self.minutes)

    def after(self, iso: str) -> bool:
        return parse_time(iso) > parse_time(self.start) + timedelta(minutes=self.minutes)


def over_budget_s(session: Session, attempt: Attempt) -> float:
    """Seconds past the session's time budget the attempt was submitted (<= 0: within it)."""
    return (parse_time(attempt.started_at) - parse_time(session.started_at)).total_seconds() - session.minutes * 60


def marks(session: Session, attempt: Attempt, window: Window | None) -> list[str]:
    """The marks of one attempt, e.g. ``["revision window", "passed over time (+2:05)"]``."""
    out = []
    if window is not None:
        if window.contains(attempt.started_at):
            out.append(REVISION)
        elif window.after(attempt.started_at):
            out.append(AFTER_REVISION)
    over = over_budget_s(session, attempt)
    if attempt.passed and over > 0:
        s = int(over)
        out.append(f"{OVER_TIME} (+{s // 60}:{s % 60:02d})")
    return out
