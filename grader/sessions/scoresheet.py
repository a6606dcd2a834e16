"""One interviewer's score sheet for one exercise: a level per rubric leaf with a note, the
feedback round (one strength, one improvement, how the revision went) and the follow-ups asked.
Read from a TOML or JSON file, or asked for interactively; checked against the exercise's rubric.

File format (TOML; JSON with the same keys works too)::

    exercise = "sampler-replay"        # optional when the session has one exercise
    interviewer = "ada"                # optional; --interviewer wins
    recommendation = "yes"             # required: strong-no | no | yes | strong-yes
    recommendation_reason = "..."      # required: why, in a sentence or two
    [levels]                           # rubric leaf id = level
    root-cause = 3
    method = 2
    [notes]                            # optional, leaf id = note
    root-cause = "Found the missing set_epoch from the ledger in 10 minutes."
    [feedback]
    strength = "..."
    improvement = "..."
    revision_outcome = "improved"      # improved | partly | unchanged | worse | not-attempted
    revision_notes = "..."
    notes = "..."                      # overall notes
    followups_asked = ["How would you prove ..."]   # the question text, or its number in `session show`

A sheet that scores no rubric leaf is refused (nothing is saved), as is one without a
recommendation and its reason.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grader.rubric import Rubric, RubricError
from grader.sessions.errors import SessionError
from grader.sessions.models import (
    RECOMMENDATIONS,
    REVISION_OUTCOMES,
    DimensionScore,
    FeedbackRound,
    Recommendation,
    ScoreSheet,
)

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
TOP_KEYS = {"exercise", "interviewer", "levels", "notes", "feedback", "recommendation", "recommendation_reason"}
FEEDBACK_KEYS = {"strength", "improvement", "revision_outcome", "revision_notes", "notes", "followups_asked"}


def clean(text: Any) -> str:
    """Text as stored: a string without control characters (newlines and tabs kept)."""
    return _CONTROL.sub("", str(text if text is not None else "")).strip()


def read_file(path: Path) -> dict[str, Any]:
    path = Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as e:
        raise SessionError(f"{path}: cannot read the score sheet ({e.strerror}); give an existing file") from None
    try:
        data = json.loads(raw) if path.suffix == ".json" else tomllib.loads(raw)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
        kind = "JSON" if path.suffix == ".json" else "TOML"
        raise SessionError(f"{path}: not valid {kind} ({e}); fix the syntax") from None
    if not isinstance(data, dict):
        raise SessionError(f"{path}: expected a table of keys (levels, notes, feedback); see `session score --help`")
    return data


def sheet_from_data(data: dict[str, Any], rubric: Rubric, sid: str, slug: str, interviewer: str,
                    followups: list[str], where: str = "score sheet") -> ScoreSheet:
    """Check ``data`` (a parsed file) against the rubric; errors are ``<where>: <field>: <problem>; <fix>``."""
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise SessionError(f"{where}: {sorted(unknown)[0]}: not a score-sheet key; use "
                           f"{', '.join(sorted(TOP_KEYS))}")
    levels = data.get("levels", {})
    notes = data.get("notes", {})
    fb = data.get("feedback", {})
    for name, v in (("levels", levels), ("notes", notes), ("feedback", fb)):
        if not isinstance(v, dict):
            raise SessionError(f"{where}: {name}: expected a table; write [{name}] with key = value lines")
    try:
        rubric.check_levels(levels, where=f"{where}: levels")
    except RubricError as e:
        raise SessionError(str(e)) from None
    stray = set(notes) - {d.id for d, _, _ in rubric.walk()}
    if stray:
        raise SessionError(f"{where}: notes: {sorted(stray)[0]}: no such dimension in rubric {rubric.id!r}; "
                           "key notes by dimension id")
    bad = set(fb) - FEEDBACK_KEYS
    if bad:
        raise SessionError(f"{where}: feedback.{sorted(bad)[0]}: not a feedback key; use {', '.join(sorted(FEEDBACK_KEYS))}")
    outcome = fb.get("revision_outcome")
    if outcome is not None and outcome not in REVISION_OUTCOMES:
        raise SessionError(f"{where}: feedback.revision_outcome: {outcome!r} is not an outcome; use one of "
                           f"{', '.join(REVISION_OUTCOMES)}")
    asked = [resolve_followup(q, followups, where) for q in fb.get("followups_asked", [])]
    if not levels:
        leaf = next(d.id for d in rubric.leaves()) if rubric.leaves() else "leaf"
        raise SessionError(f"{where}: levels: the sheet scores no rubric leaf, so it is empty; score at least one "
                           f"under [levels] (e.g. {leaf} = {rubric.levels[-1]})")
    rec = recommendation_from(data.get("recommendation"), data.get("recommendation_reason"), where)
    scores = {d: DimensionScore(d, int(lv), clean(notes.get(d, ""))) for d, lv in levels.items()}
    for d, note in notes.items():  # a note on a dimension left unscored (or a parent) is kept with level 0
        if d not in scores:
            scores[d] = DimensionScore(d, 0, clean(note))
    return ScoreSheet(sid, slug, clean(interviewer), scores, FeedbackRound(
        strength=clean(fb.get("strength", "")), improvement=clean(fb.get("improvement", "")),
        revision_outcome=outcome, revision_notes=clean(fb.get("revision_notes", "")), notes=clean(fb.get("notes", "")),
        followups_asked=asked), recommendation=rec)


def normalise_verdict(v: Any) -> str:
    return re.sub(r"[\s_]+", "-", clean(v).lower())


def recommendation_from(verdict: Any, reason: Any, where: str) -> Recommendation:
    """The overall recommendation and its reason, both required."""
    choices = ", ".join(RECOMMENDATIONS)
    if verdict is None or not clean(verdict):
        raise SessionError(f"{where}: recommendation: missing; add recommendation = one of {choices}, "
                           "with recommendation_reason")
    v = normalise_verdict(verdict)
    if v not in RECOMMENDATIONS:
        raise SessionError(f"{where}: recommendation: {clean(verdict)!r} is not a recommendation; use one of {choices}")
    why = clean(reason)
    if not why:
        raise SessionError(f"{where}: recommendation_reason: missing; say why you recommend {v} "
                           "(recommendation_reason = \"...\")")
    return Recommendation(v, why)


def resolve_followup(q: Any, followups: list[str], where: str) -> str:
    """A follow-up given by its number (1-based, as `session show` lists them) or its text."""
    if isinstance(q, int) and not isinstance(q, bool):
        if 1 <= q <= len(followups):
            return followups[q - 1]
        raise SessionError(f"{where}: feedback.followups_asked: {q} is not a follow-up number; use 1-{len(followups)}")
    text = clean(q)
    if not text:
        raise SessionError(f"{where}: feedback.followups_asked: an empty question; give its text or number")
    return text


Ask = Callable[..., Any]  # click.prompt-like: ask(text, default=..., type=...)


def interactive(rubric: Rubric, sid: str, slug: str, interviewer: str, followups: list[str],
                ask: Ask, say: Callable[[str], None], previous: ScoreSheet | None = None) -> ScoreSheet:
    """Ask for each leaf's level (blank keeps the previous answer or leaves it unscored), a note,
    the follow-ups asked, and the feedback round."""
    prev_levels = previous.level_map() if previous else {}
    prev_notes = {k: v.note for k, v in (previous.levels if previous else {}).items()}
    levels, notes = {}, {}
    say(f"{rubric.title}: score each leaf {rubric.levels[0]}-{rubric.levels[-1]} (blank: leave unscored)")
    for d, depth, _ in rubric.walk():
        say(("  " * depth) + f"[{d.id}] {d.title}: {d.question}")
        if not d.is_leaf:
            continue
        for text in d.levels:
            say(("  " * depth) + f"    {text}")
        while True:
            raw = str(ask(f"{d.id} level", default=str(prev_levels.get(d.id, "")))).strip()
            if not raw:
                break
            if raw.isdigit() and int(raw) in rubric.levels:
                levels[d.id] = int(raw)
                break
            say(f"    {raw!r} is not a level; type one of {', '.join(map(str, rubric.levels))}, or leave blank")
        note = clean(ask(f"{d.id} note", default=prev_notes.get(d.id, "")))
        if note:
            notes[d.id] = note
    asked: list[Any] = []
    if followups:
        say("follow-ups (numbers, comma-separated, of those you asked):")
        for i, q in enumerate(followups, 1):
            say(f"  {i}. {q}")
        raw = str(ask("asked", default="")).strip()
        asked = [int(x) for x in re.split(r"[,\s]+", raw) if x.isdigit()]
    fb = previous.feedback if previous else FeedbackRound()
    say(f"feedback round: {rubric.feedback.strength_prompt}")
    strength = ask("strength", default=fb.strength)
    say(rubric.feedback.improvement_prompt)
    improvement = ask("improvement", default=fb.improvement)
    say(f"revision ({rubric.feedback.revision_minutes} min); watch for: " + " / ".join(rubric.feedback.watch_for))
    while True:
        outcome = str(ask(f"revision outcome ({'|'.join(REVISION_OUTCOMES)})",
                          default=fb.revision_outcome or "")).strip() or None
        if outcome is None or outcome in REVISION_OUTCOMES:
            break
        say(f"    {outcome!r} is not an outcome; type one of {', '.join(REVISION_OUTCOMES)}")
    revision_notes = ask("revision notes", default=fb.revision_notes)
    overall = ask("overall notes", default=fb.notes)
    prev = previous.recommendation if previous else None
    while True:
        verdict = normalise_verdict(ask(f"recommendation ({'|'.join(RECOMMENDATIONS)})",
                                        default=prev.verdict if prev else ""))
        if verdict in RECOMMENDATIONS:
            break
        say(f"    {verdict!r} is not a recommendation; type one of {', '.join(RECOMMENDATIONS)}")
    while True:
        reason = clean(ask("why (required)", default=prev.reason if prev else ""))
        if reason:
            break
        say("    the recommendation needs a reason; say why in a sentence")
    data = {"levels": levels, "notes": notes, "recommendation": verdict, "recommendation_reason": reason,
            "feedback": {"strength": strength, "improvement": improvement, "revision_outcome": outcome,
                         "revision_notes": revision_notes, "notes": overall, "followups_asked": asked}}
    return sheet_from_data(data, rubric, sid, slug, interviewer, followups, where="interactive")
