"""The box at the top of a debrief: what a hiring committee reads first. The verdict of each
exercise, the time used against the budget, the attempts (first pass, passes over time, attempts
in the revision window), each interviewer's recommendation with its reason, and the disagreement
to talk through before deciding: recommendations that differ, rubric dimensions two or more levels
apart, whole-rubric scores a level or more apart. Built from what the debrief already gathered."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from grader.sessions.models import RECOMMENDATIONS
from grader.sessions.timeline import OVER_TIME, REVISION

if TYPE_CHECKING:
    from grader.report.data import ExerciseReport

# Whole-rubric scores are weighted means, so they move less than one leaf does: a level between two
# interviewers' means is as large a gap as calibration's two levels on a single dimension.
OVERALL_APART = 1.0
HIRE = {"yes", "strong-yes"}  # the recommendations for hiring; the rest of RECOMMENDATIONS are against


@dataclass
class ExerciseLine:
    slug: str
    title: str
    graded: bool
    verdict: str  # "passed", "failed", "environment failure", "no completed attempt", "scored by the interviewers"
    passed: bool | None
    score: float | None
    attempts: int
    first_pass_n: int | None  # the first passing attempt (None: none passed)
    first_pass_s: float | None  # when it was submitted, from the session clock's start
    over_time: list[int] = field(default_factory=list)  # attempts that passed after the budget
    in_revision: list[int] = field(default_factory=list)  # attempts made in the revision window


@dataclass
class Call:
    """One interviewer's recommendation on one exercise."""

    interviewer: str
    slug: str
    words: str  # "strong yes", or "not given" for a sheet saved before recommendations existed
    reason: str
    overall: float | None  # the whole-rubric score of their sheet
    top: int  # the rubric's highest level


@dataclass
class Summary:
    verdict: str  # one line over the graded exercises
    used_s: float
    budget_s: float
    closed: bool
    exercises: list[ExerciseLine]
    calls: list[Call]
    talk_through: list[str]  # the disagreements, one sentence each
    agreement: str  # what to say when talk_through is empty

    @property
    def over_s(self) -> float:
        return self.used_s - self.budget_s

    @property
    def attempts(self) -> int:
        return sum(e.attempts for e in self.exercises)

    @property
    def share(self) -> int:
        """Per cent of the budget used."""
        return round(100 * self.used_s / self.budget_s) if self.budget_s else 0


def _level(v: float) -> str:
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.2f}"


def _exercise_line(e: ExerciseReport) -> ExerciseLine:
    sx = e.view.exercise
    res = e.latest_result
    if not sx.graded:
        verdict, passed = "scored by the interviewers", None
    elif res is None:
        verdict, passed = "no completed attempt", None
    elif res.get("environment_failure"):
        verdict, passed = "environment failure (not the candidate's)", None
    else:
        verdict, passed = ("passed" if res.get("passed") else "failed"), bool(res.get("passed"))
    first = next((t for t in e.timeline if t.attempt.passed), None)
    return ExerciseLine(
        sx.slug, sx.title or sx.slug, sx.graded, verdict, passed, res.get("score") if res else None,
        len(e.timeline), first.attempt.n if first else None, first.offset_s if first else None,
        [t.attempt.n for t in e.timeline if any(m.startswith(OVER_TIME) for m in t.marks)],
        [t.attempt.n for t in e.timeline if REVISION in t.marks])


def _disagreements(e: ExerciseReport, several: bool) -> list[str]:
    where = f"{e.slug}: " if several else ""
    sheets = e.view.sheets
    out = []
    given = {sh.interviewer: sh.recommendation.verdict for sh in sheets if sh.recommendation}
    if len(set(given.values())) > 1:
        sides = {v in HIRE for v in given.values()}
        kind = "split for and against hiring" if len(sides) > 1 else "same side, different strength"
        calls = ", ".join(f"{w} {v.replace('-', ' ')}" for w, v in
                          sorted(given.items(), key=lambda kv: (RECOMMENDATIONS.index(kv[1]), kv[0])))
        out.append(f"{where}recommendations differ ({kind}): {calls}")
    missing = [sh.interviewer for sh in sheets if not sh.recommendation]
    if missing and len(sheets) > 1:
        out.append(f"{where}no recommendation from {', '.join(missing)}: ask for one before deciding")
    for d in e.calibration.flagged:
        scores = ", ".join(f"{w} {_level(v)}" for w, v in d.scores.items() if v is not None)
        out.append(f"{where}{d.title} ({d.id}) scored {_level(d.spread or 0.0)} levels apart: {scores}")
    overall = {w: v for w, v in e.calibration.overall.items() if v is not None}
    if len(overall) > 1 and max(overall.values()) - min(overall.values()) >= OVERALL_APART:
        out.append(f"{where}whole-rubric scores {max(overall.values()) - min(overall.values()):.2f} levels apart: "
                   + ", ".join(f"{w} {v:.2f}" for w, v in overall.items()))
    return out


def _agreement(exercises: list[ExerciseReport]) -> str:
    scorers = {sh.interviewer for e in exercises for sh in e.view.sheets}
    if not scorers:
        return "Not scored yet: no interviewer has filed a sheet."
    if all(len(e.view.sheets) < 2 for e in exercises):
        return (f"Only {', '.join(sorted(scorers))} scored each exercise: no second opinion to reconcile.")
    return ("No disagreement: the recommendations match, no dimension is two or more levels apart and the "
            "whole-rubric scores are within a level.")


def summarise(clock: dict[str, Any], exercises: list[ExerciseReport]) -> Summary:
    lines = [_exercise_line(e) for e in exercises]
    graded = [x for x in lines if x.graded]
    passed = sum(bool(x.passed) for x in graded)
    if not graded:
        verdict = "No graded exercise: the interviewers' scores decide."
    else:
        verdict = f"Passed {passed} of {len(graded)} graded exercise{'' if len(graded) == 1 else 's'}."
    calls = [Call(sh.interviewer, e.slug, sh.recommendation_words,
                  sh.recommendation.reason if sh.recommendation else "", e.calibration.overall.get(sh.interviewer),
                  e.rubric.levels[-1])
             for e in exercises for sh in e.view.sheets]
    talk = [t for e in exercises for t in _disagreements(e, len(exercises) > 1)]
    return Summary(verdict, float(clock["elapsed_s"]), float(clock["budget_s"]), bool(clock["closed"]),
                   lines, calls, talk, _agreement(exercises))
