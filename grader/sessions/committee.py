"""The hiring committee's part of `session show`, as plain lines at most ``width`` columns: each
interviewer's recommendation and reason per exercise, the attempts marked on the timeline
(revision window, passed over time), and the sheets deleted. ``grader.commands.session`` prints
them after the live view."""

from __future__ import annotations

import textwrap

from grader.sessions.live import ExerciseView, SessionView
from grader.sessions.models import parse_time

WIDTH = 80


def _mmss(seconds: float) -> str:
    s = int(abs(seconds))
    return f"{'-' if seconds < 0 else ''}{s // 60}:{s % 60:02d}"


def _wrap(text: str, indent: str, width: int) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=True, break_on_hyphens=False) or [indent.rstrip()]


def exercise_lines(view: SessionView, ev: ExerciseView, width: int = WIDTH) -> list[str]:
    out = [f"{ev.exercise.slug}:"]
    if ev.window:
        start = (parse_time(ev.window.start) - parse_time(view.session.started_at)).total_seconds()
        out += _wrap(f"revision window: from {_mmss(start)} for {ev.window.minutes} min "
                     "(feedback given)", "  ", width)
    for n, ms in ev.marks.items():
        if ms:
            out += _wrap(f"attempt #{n}: {'; '.join(ms)}", "  ", width)
    if not ev.sheets:
        out.append("  no score sheet yet")
    for sh in ev.sheets:
        rec = sh.recommendation
        line = f"{sh.interviewer}: {sh.recommendation_words}" + (f": {rec.reason}" if rec else "")
        out += _wrap(line, "  ", width)
    return out


def lines(view: SessionView, width: int = WIDTH) -> list[str]:
    """The whole section; empty when there is nothing a committee weighs yet."""
    body: list[str] = []
    for ev in view.exercises:
        body += exercise_lines(view, ev, width)
    for d in view.deletions:
        body += _wrap(f"deleted: {d.interviewer}'s sheet for {d.slug} at {d.deleted_at}", "", width)
    return ["", "scorecards (recommendation per interviewer; timeline marks):", *body] if body else []
