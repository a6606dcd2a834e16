"""Printing for `trainwreck session`, `report` and `bundle` (tables on stdout; diagnostics go
through ``grader.console``). Cells are data, never rich markup."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from grader import console


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


def session_list(sessions, counts: dict[str, int]) -> None:
    if not sessions:
        console.text("no sessions")
        return
    _table(None, ["session", "candidate", "started", "minutes", "attempts", "state"],
           [[s.id, s.candidate, s.started_at, s.minutes, counts.get(s.id, 0),
             f"closed {s.closed_at}" if s.closed else f"open, {mmss(s.elapsed_s())} elapsed"] for s in sessions])


def session_view(view) -> None:
    s, clock = view.session, view.clock()
    state = "closed" if clock["closed"] else ("OVER TIME" if clock["overrun"] else "running")
    console.text(f"session {s.id}: {s.candidate}  clock {mmss(clock['elapsed_s'])} of {s.minutes}:00 "
                 f"({mmss(clock['remaining_s'])} left, {state})")
    for ev in view.exercises:
        sx = ev.exercise
        console.text("")
        console.text(f"== {sx.slug}: {sx.title}  (rubric {ev.rubric.id}; workspace {sx.workspace})")
        if not sx.graded:
            console.text("   scored by the interviewer alone: no automatic grading")
        elif not ev.attempts:
            console.text("   no attempt yet")
        else:
            _table("attempts", ["#", "at", "status", "verdict", "score", "diff", "submission"],
                   [[a.n, mmss(_offset(s, a.started_at)), a.status,
                     "" if a.passed is None else ("PASSED" if a.passed else "failed"),
                     "" if a.score is None else f"{a.score:.2f}", _diffstat(a.diff), a.submission_sha256[:10]]
                    for a in ev.attempts])
        if ev.checks:
            nums = [a.n for a in ev.done]
            _table("checks by attempt (* = flipped)", ["check", *[f"#{n}" for n in nums]],
                   [[c.name, *[mark(v) + ("*" if n in c.flips else "") for v, n in zip(c.verdicts, nums)]]
                    for c in ev.checks])
        if ev.latest and ev.latest.result:
            for c in ev.latest.result.get("checks", []):
                if not c["passed"]:
                    console.text(f"   {c['name']}: {c['message']}")
            iso = ev.latest.result.get("isolation") or {}
            if iso.get("kind") == "none":
                console.text(f"   isolation: NONE, the latest attempt ran unisolated ({iso.get('reason')})",
                             style="bold yellow")
            for f in ev.latest.result.get("flags") or []:
                where = f.get("where") or (f"{f['run']} run" if f.get("run") else "")
                console.text(f"   flag ({f.get('kind')}): {f.get('what')}" + (f" [{where}]" if where else ""))
        if ev.followups:
            console.text("follow-ups the evidence calls for:")
            for i, f in enumerate(ev.followups, 1):
                console.text(f"  {i}. {f.followup.question}  [{f.because}]")
        if ev.sheets:
            console.text("scored by: " + ", ".join(sh.interviewer for sh in ev.sheets))
    quiz_summary(view.quiz)


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
