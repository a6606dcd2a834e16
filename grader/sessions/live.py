"""What the interviewer watches during a session, and what the debrief starts from: per
exercise, the attempts, each check's verdict across attempts (and where it flipped), and the
follow-up questions the evidence calls for. Built from the store alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grader.attempts import Attempt
from grader.rubric import Rubric, Selected, exercise_followups, find_rubric, for_exercise
from grader.sessions import tripwire
from grader.sessions.models import Reveal, ScoreSheet, Session, SessionExercise, SheetDeletion, parse_time
from grader.sessions.similarity import Match
from grader.sessions.store import Store
from grader.sessions.timeline import Window, marks


@dataclass
class CheckRow:
    name: str
    verdicts: list[bool | None]  # per attempt, oldest first; None: not in that attempt's result
    flips: list[int] = field(default_factory=list)  # attempt numbers where the verdict changed

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "verdicts": self.verdicts, "flips": self.flips}


@dataclass
class ExerciseView:
    exercise: SessionExercise
    rubric: Rubric
    attempts: list[Attempt]
    checks: list[CheckRow]
    followups: list[Selected]
    sheets: list[ScoreSheet]
    window: Window | None = None  # the revision window, once the feedback round was given
    marks: dict[int, list[str]] = field(default_factory=dict)  # attempt number -> timeline marks
    matches: list[Match] = field(default_factory=list)  # attempts close to the reference or another's

    @property
    def done(self) -> list[Attempt]:
        return [a for a in self.attempts if a.status == "done"]

    @property
    def latest(self) -> Attempt | None:
        return self.done[-1] if self.done else None

    def to_json(self) -> dict[str, Any]:
        return {"exercise": self.exercise.slug, "title": self.exercise.title, "graded": self.exercise.graded,
                "workspace": self.exercise.workspace, "rubric": self.rubric.id,
                "attempts": [a.to_json() for a in self.attempts],
                "checks": [c.to_json() for c in self.checks],
                "followups": [{"question": s.followup.question, "because": s.because,
                               "strong_answer": s.followup.strong_answer} for s in self.followups],
                "scored_by": [s.interviewer for s in self.sheets],
                "recommendations": {s.interviewer: s.recommendation.to_json() if s.recommendation else None
                                    for s in self.sheets},
                "revision_window": {"start": self.window.start, "minutes": self.window.minutes} if self.window else None,
                "marks": {str(n): m for n, m in self.marks.items() if m},
                "similar": [m.to_json() for m in self.matches]}


@dataclass
class SessionView:
    session: Session
    exercises: list[ExerciseView]
    quiz: list[dict[str, Any]] = field(default_factory=list)  # quantitative answers, in the order given
    deletions: list[SheetDeletion] = field(default_factory=list)  # score sheets deleted, oldest first
    reveals: list[Reveal] = field(default_factory=list)  # answers asked for while it was open, oldest first
    unwatched: str = ""  # why reads of solutions/ from outside the kit were not watched ("" when they were)

    def clock(self) -> dict[str, Any]:
        elapsed = self.session.elapsed_s()
        budget = self.session.minutes * 60
        return {"elapsed_s": round(elapsed), "budget_s": budget, "remaining_s": round(budget - elapsed),
                "overrun": elapsed > budget, "closed": self.session.closed}

    def to_json(self) -> dict[str, Any]:
        return {"session": self.session.to_json(), "clock": self.clock(),
                "exercises": [e.to_json() for e in self.exercises], "quiz": self.quiz,
                "deleted_sheets": [d.to_json() for d in self.deletions],
                "answers": self.session.answers, "reveals": [r.to_json() for r in self.reveals],
                "answer_reads_watched": not self.unwatched, "answer_reads_unwatched": self.unwatched or None}


def check_rows(attempts: list[Attempt]) -> list[CheckRow]:
    done = [a for a in attempts if a.status == "done" and a.result]
    names: list[str] = []
    for a in done:
        assert a.result is not None, "done holds only attempts with a result"
        for c in a.result.get("checks", []):
            if c["name"] not in names:
                names.append(c["name"])
    rows = []
    for name in names:
        verdicts = [a.checks().get(name) for a in done]
        flips = [done[i].n for i in range(1, len(done))
                 if verdicts[i] is not None and verdicts[i - 1] is not None and verdicts[i] != verdicts[i - 1]]
        rows.append(CheckRow(name, verdicts, flips))
    return rows


def exercise_rubric(sx: SessionExercise) -> Rubric:
    """The rubric as the exercise names it now (extra dimensions merged), or the one recorded
    when the session was made if the exercise is no longer in the kit."""
    from grader.errors import ManifestError
    from grader.exercises import find

    try:
        ex = find(sx.slug)
    except ManifestError:
        return find_rubric(sx.rubric_id)
    return for_exercise(ex.manifest, ex.dir / "exercise.toml")


def exercise_view(store: Store, session: Session, sx: SessionExercise) -> ExerciseView:
    rubric = exercise_rubric(sx)
    attempts = store.attempts(session.id, sx.slug)
    results = [a.result for a in attempts if a.status == "done" and a.result]
    followups = rubric.select_followups(results, exercise_followups(sx.slug))
    given = store.feedback_given_at(session.id, sx.slug)
    window = Window(given, rubric.feedback.revision_minutes) if given else None
    return ExerciseView(sx, rubric, attempts, check_rows(attempts), followups, store.sheets(session.id, sx.slug),
                        window, {a.n: marks(session, a, window) for a in attempts},
                        similar(store, session, sx.slug, attempts))


def similar(store: Store, session: Session, slug: str, attempts: list[Attempt]) -> list[Match]:
    """The graded attempts close to the reference fix, or to another session's latest graded
    attempt of the same exercise (``grader.sessions.similarity``); none for an exercise the kit
    no longer has or one without a script."""
    from grader.errors import ManifestError
    from grader.exercises import find
    from grader.sessions.similarity import Other, matches
    from grader.sessions.workspace import editable, snapshot

    done = [(a.n, a.files) for a in attempts if a.status == "done" and a.files]
    if not done:
        return []
    try:
        ex = find(slug)
    except ManifestError:
        return []
    names = editable(ex.manifest)
    if not names:
        return []
    others = [Other(f"session {s.id}", f"session {s.id} ({s.candidate}) #{a.n}", a.files)
              for s, a in store.latest_done(slug, session.id)]
    if all((ex.solution_dir / n).is_file() for n in names):
        others.insert(0, Other("reference", "reference fix", snapshot(ex.solution_dir, names)))
    return matches(snapshot(ex.dir, names), done, others)


def session_view(store: Store, ref: str) -> SessionView:
    session = store.session(ref)
    store.reap(session.id)
    exercises = store.exercises(session.id)
    tripwire.sweep()
    reads = tripwire.reveals(session, [sx.slug for sx in exercises])
    return SessionView(session, [exercise_view(store, session, sx) for sx in exercises],
                       store.quiz_answers(session.id), store.sheet_deletions(session.id),
                       sorted(store.reveals(session.id) + reads, key=lambda r: parse_time(r.at)),
                       tripwire.watched(session.id))
