"""Printing for `trainwreck session`, `report` and `bundle` (tables on stdout; diagnostics go
through ``grader.console``). Cells are data, never rich markup."""

from __future__ import annotations

import textwrap
from typing import Any

from rich.table import Table
from rich.text import Text

from grader import console
from grader.text import printable


def _t(v: Any) -> Text:
    return Text("" if v is None else str(v))


def _table(title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    t = Table(title=_t(title) if title else None, title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, no_wrap=i == 0)
    for r in rows:
        t.add_row(*(_t(v) for v in r))
    console.out.print(t)


def mmss(seconds: float) -> str:
    s = int(abs(seconds))
    return f"{'-' if seconds < 0 else ''}{s // 60}:{s % 60:02d}"


def mark(v: bool | None) -> str:
    return "-" if v is None else ("pass" if v else "FAIL")


def session_created(session, exercises) -> None:
    console.text(f"session {session.id} for {session.candidate}: {session.minutes} min, clock started")
    for sx in exercises:
        how = "graded: run `trainwreck grade` inside it" if sx.graded else "scored by the interviewer alone"
        console.text(f"  {sx.slug}: {sx.workspace}  ({how})")
    console.text("  hints and the reference: " + ("refused while it is open" if session.answers == "refuse" else
                                                 "each reveal recorded while it is open (--answers refuse)"))


def session_list(sessions, counts: dict[str, int]) -> None:
    if not sessions:
        console.text("no sessions")
        return
    _table(None, ["session", "candidate", "started", "minutes", "attempts", "state"],
           [[s.id, s.candidate, s.started_at, s.minutes, counts.get(s.id, 0),
             f"closed {s.closed_at}" if s.closed else f"open, {mmss(s.elapsed_s())} elapsed"] for s in sessions])


def _wrapped(line: str, indent: str = "   ", hang: str = "  ", style: str | None = None) -> None:
    """``line`` word-wrapped at the terminal's width, each further line indented by ``hang`` more."""
    width = max(20, console.out.width)
    for part in textwrap.wrap(printable(line), width=width, initial_indent=indent,
                              subsequent_indent=indent + hang, break_long_words=True,
                              break_on_hyphens=False) or [""]:
        console.text(part, style=style)


def _cut(line: str, indent: str = "   ", style: str | None = None) -> None:
    """``line`` on one line after ``indent``, ending in an ellipsis where it does not fit."""
    room = max(1, console.out.width - len(indent))
    line = " ".join(printable(line).split())
    console.text(indent + (line if len(line) <= room else line[:room - 1].rstrip() + "…"), style=style)


def _check_columns(names: list[str], nums: list[int]) -> int:
    """How many attempt columns fit beside the check names."""
    key = max([len("check"), *map(len, names)])
    col = max([len("FAIL*"), *(len(f"#{n}") for n in nums)])
    return max(1, (console.out.width - key) // (col + 2))


def session_view(view, verbose: bool = False) -> None:
    """The live view at the terminal's width: one line per attempt, the checks by attempt (the
    latest that fit; all with ``verbose``), each failing check's deciding figure and each flag on
    one line (whole with ``verbose``), the workspace path on a line of its own, the follow-ups
    word-wrapped."""
    s, clock = view.session, view.clock()
    state = "closed" if clock["closed"] else ("OVER TIME" if clock["overrun"] else "running")
    _wrapped(f"session {s.id}: {s.candidate}  clock {mmss(clock['elapsed_s'])} of {s.minutes}:00 "
             f"({mmss(clock['remaining_s'])} left, {state})", indent="")
    for ev in view.exercises:
        sx = ev.exercise
        console.text("")
        _cut(f"== {sx.slug}: {sx.title}", indent="")
        console.text(f"   rubric {ev.rubric.id}; workspace:")
        console.text(f"  {sx.workspace}")  # a path on a line of its own: whole, to be copied
        if not sx.graded:
            console.text("   scored by the interviewer alone: no automatic grading")
        elif not ev.attempts:
            console.text("   no attempt yet")
        else:
            console.text("attempts:")
            console.lines(["#", "at", "status", "verdict", "score", "diff", "submission"],
                          [[a.n, mmss(_offset(s, a.started_at)), a.status,
                            "" if a.passed is None else ("PASSED" if a.passed else "failed"),
                            "" if a.score is None else f"{a.score:.2f}", _diffstat(a.diff), a.submission_sha256[:10]]
                           for a in ev.attempts], right=(0, 1, 4))
        if ev.checks:
            _checks_by_attempt(ev, verbose)
        if ev.latest and ev.latest.result:
            checks = [c for c in ev.latest.result.get("checks", []) if not c["passed"]]
            if checks:
                console.text(f"failing in attempt #{ev.latest.n}:")
            for c in checks:
                if verbose:
                    _wrapped(f"{c['name']}: {c['message']}")
                else:
                    room = console.out.width - len(f"   {c['name']}: ")
                    _cut(f"{c['name']}: {console.headline(c['name'], c['message'], room)}")
            iso = ev.latest.result.get("isolation") or {}
            if iso.get("kind") == "none":
                _wrapped(f"isolation: NONE, the latest attempt ran unisolated ({iso.get('reason')})",
                         style="bold yellow")
            for f in ev.latest.result.get("flags") or []:
                where = f.get("where") or (f"{f['run']} run" if f.get("run") else "")
                line = f"flag ({f.get('kind')})" + (f" [{where}]" if where else "") + f": {f.get('what')}"
                (_wrapped if verbose else _cut)(line)
        for m in ev.matches:  # the interviewer's to weigh: a small edit is the same in any right fix
            (_wrapped if verbose else _cut)(f"similar: {m.line}", style="bold yellow")
        if ev.followups:
            console.text("follow-ups the evidence calls for:")
            for i, f in enumerate(ev.followups, 1):
                _wrapped(f"{i}. {f.followup.question}  [{f.because}]", indent="  ", hang=" " * len(f"{i}. "))
        if ev.sheets:
            _wrapped("scored by: " + ", ".join(sh.interviewer for sh in ev.sheets), indent="")
    reveals(view, verbose)
    quiz_summary(view.quiz)
    if not verbose and any(ev.latest and ev.latest.result for ev in view.exercises):
        console.text("whole evidence: --verbose, or --json")


def reveals(view, verbose: bool = False) -> None:
    """The kit's answers asked for while the session was open: one line each (when, exercise,
    what, shown or refused; the folder it was asked from cut to fit, whole with ``verbose``)."""
    s = view.session
    if not view.reveals and s.answers == "record" and not view.unwatched:
        return
    console.text("")
    shown = sum(r.outcome != "refused" for r in view.reveals)
    policy = "refused while open" if s.answers == "refuse" else "recorded while open"
    console.text(f"answers asked for: {len(view.reveals)} ({shown} shown); hints and reference {policy}",
                 style="bold yellow" if shown else None)
    if view.unwatched:
        _wrapped(f"reads of solutions/ outside the kit not watched: {view.unwatched}")
    for r in view.reveals:
        (_wrapped if verbose else _cut)(f"{mmss(_offset(s, r.at)):>6} {r.slug}: {r.what}, {r.outcome}  {r.place}")


def _checks_by_attempt(ev, verbose: bool) -> None:
    """The checks' verdicts by attempt (``*``: flipped since the attempt before): the latest
    attempts that fit the terminal, or with ``verbose`` all of them, in as many tables as fit."""
    nums = [a.n for a in ev.done]
    names = [c.name for c in ev.checks]
    per = _check_columns(names, nums)
    cols = list(range(len(nums)))
    chunks = [cols[i:i + per] for i in range(0, len(cols), per)] if verbose else [cols[-per:]]
    left = 0 if verbose else len(cols) - len(chunks[0])
    gone = "" if not left else (f"#{nums[0]}" if left == 1 else f"#{nums[0]}-#{nums[left - 1]}")
    console.text("checks by attempt (* = flipped)" + (f"; {gone} left out, see --verbose" if gone else "") + ":")
    for chunk in chunks:
        console.lines(["check", *[f"#{nums[i]}" for i in chunk]],
                      [[c.name, *[mark(c.verdicts[i]) + ("*" if nums[i] in c.flips else "") for i in chunk]]
                       for c in ev.checks])


def _offset(session, iso: str) -> float:
    from grader.sessions.models import parse_time

    return (parse_time(iso) - parse_time(session.started_at)).total_seconds()


def _diffstat(diff: str) -> str:
    plus = sum(1 for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
    minus = sum(1 for line in diff.splitlines() if line.startswith("-") and not line.startswith("---"))
    return f"+{plus} -{minus}" if (plus or minus) else "unchanged"


def sheet_saved(sheet, rubric) -> None:
    scores = rubric.score({k: v for k, v in sheet.level_map().items()})
    overall = scores[""]
    console.text(f"saved {sheet.interviewer}'s scores for {sheet.slug}: "
                 f"{len(sheet.level_map())} of {len(rubric.leaves())} leaves scored"
                 + (f", overall {overall:.2f} of {rubric.levels[-1]}" if overall is not None else ""))


def calibration(cal, slug: str) -> None:
    if len(cal.interviewers) < 2:
        return
    rows = []
    for d in cal.dimensions:
        rows.append(["  " * d.depth + d.id, *[("" if d.scores[w] is None else f"{d.scores[w]:g}") for w in cal.interviewers],
                     "" if d.spread is None else f"{d.spread:g}", "APART" if d.flagged else d.status])
    _table(f"{slug}: calibration", ["dimension", *cal.interviewers, "spread", "agreement"], rows)


def report_written(path, fmt: str, seconds: float) -> None:
    console.text(f"wrote {fmt} report: {path} ({seconds:.2f} s)")


def bundle_written(res) -> None:
    console.text(f"bundle for {', '.join(res.exercises)}: {res.path} ({res.files} files, {res.bytes / 1e6:.2f} MB)")
    console.text("the candidate runs: python run.py SLUG | python selfcheck.py SLUG (see README.md inside)")


def quiz_verdict(question, verdict) -> None:
    mark = "right" if verdict.correct else "WRONG"
    console.text(f"{mark}  [{question.id}] {verdict.feedback}")


def quiz_summary(answers: list[dict]) -> None:
    if not answers:
        return
    right = sum(a["correct"] for a in answers)
    console.text("")
    console.text(f"quantitative questions: {right} of {len(answers)} answers right")
    for a in answers:
        console.text(f"  {'right' if a['correct'] else 'WRONG'}  {a['question']}: {a['answer']}")
