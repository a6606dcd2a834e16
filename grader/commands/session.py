"""``trainwreck session new | show | import | score | unscore | feedback | list | close``: the interviewer's side of a live work
sample, recorded in the session store (SQLite; ``--db``, default ``$TRAINWRECK_HOME/sessions.db``
or ``~/.trainwreck/sessions.db``)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from grader import console
from grader.commands._options import device_option
from grader.sessions import console as show

db_option = click.option("--db", type=click.Path(path_type=Path), envvar="TRAINWRECK_DB", default=None,
                         help="The session database (default $TRAINWRECK_HOME/sessions.db, else ~/.trainwreck/sessions.db).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")


def _store(db):
    from grader.sessions.store import Store

    return Store.open(db)


@click.group("session")
def command() -> None:
    """Interview sessions: workspaces, attempts, rubric scores, the feedback round."""


@command.command("new")
@click.option("--candidate", required=True, help="The candidate's name.")
@click.option("--exercise", "exercises", multiple=True, required=True, help="An exercise slug (repeat for more).")
@click.option("--minutes", type=click.IntRange(min=1), default=None, help="Time budget (default: the exercises' own).")
@click.option("--dir", "root", type=click.Path(path_type=Path), default=None,
              help="Where the workspaces go, one folder per exercise (default ./session-<id>).")
@click.option("--answers", type=click.Choice(["record", "refuse"]), default="record", show_default=True,
              help="What the kit's hint and solution commands do for these exercises while the session is "
                   "open: record each reveal in it, or refuse it (the try recorded).")
@db_option
@json_option
def new_cmd(candidate, exercises, minutes, root, answers, db, as_json):
    """Make one workspace per exercise for CANDIDATE and start the clock."""
    from grader.sessions.lifecycle import new_session

    with _store(db) as store:
        session, exs = new_session(store, candidate, list(exercises), minutes, root, answers=answers)
        if as_json:
            console.emit_json({"session": session.id, "db": str(store.path), "candidate": session.candidate,
                               "minutes": session.minutes, "started_at": session.started_at,
                               "workspaces": [sx.workspace for sx in exs],
                               "exercises": [sx.to_json() for sx in exs]})
        else:
            show.session_created(session, exs)


@command.command("show")
@click.argument("session")
@click.option("--watch", type=click.FloatRange(min=0.5), default=None, metavar="SECONDS",
              help="Redraw every SECONDS until Ctrl-C.")
@click.option("--verbose", "-v", is_flag=True,
              help="The whole evidence: each failing check's message, each flag, every attempt's verdicts.")
@db_option
@json_option
def show_cmd(session, watch, verbose, db, as_json):
    """The live view: clock, attempts, checks flipping between attempts, the follow-ups to ask.
    One line per attempt and per failing check (its deciding figure); --verbose shows the whole
    evidence."""
    from grader.sessions.committee import WIDTH, lines
    from grader.sessions.live import session_view

    with _store(db) as store:
        while True:
            view = session_view(store, session)
            if as_json:
                console.emit_json(view.to_json())
            else:
                if watch:
                    console.out.clear()
                show.session_view(view, verbose)
                for line in lines(view, min(WIDTH, console.out.width)):
                    console.text(line)
            if not watch or as_json:
                return
            time.sleep(watch)


@command.command("import")
@click.argument("session")
@click.argument("archive", type=click.Path(path_type=Path))
@device_option
@click.option("--no-sandbox", "no_sandbox", is_flag=True,
              help="Grade without the bubblewrap sandbox (unisolated; result.json says so).")
@click.option("--verbose", "-v", is_flag=True, help="Each check's whole evidence.")
@db_option
@json_option
def import_cmd(session, archive, device, no_sandbox, verbose, db, as_json):
    """Record a remote candidate's submission (the ARCHIVE their bundle's submit.py wrote) as an
    attempt of SESSION at the time it was submitted, and grade it here, in the sandbox, as a
    local attempt is graded. The archive is checked first (session, exercise, editable files
    only, hashes, sizes, no links or paths outside it); a bad one is refused and nothing is
    recorded."""
    import sys

    from grader.bundle.intake import check, record
    from harness.executor import executor_for

    executor = executor_for(sandboxed=not no_sandbox)
    with _store(db) as store:
        intake = check(store, session, archive)
        console.info(f"{archive}: {intake.exercise.slug}, submitted at {intake.at}")
        res = record(store, intake, device=device, executor=executor, progress=console.info)
    console.grade_result(res, as_json, verbose)
    sys.exit(res.exit_code)


@command.command("score")
@click.argument("session")
@click.option("--interviewer", required=True, help="Who is scoring (each interviewer scores independently).")
@click.option("--exercise", default=None, help="Which exercise (needed when the session has several).")
@click.option("--file", "sheet_file", type=click.Path(path_type=Path), default=None,
              help="A TOML or JSON score sheet (levels, notes, feedback); without it, asked interactively.")
@db_option
@json_option
def score_cmd(session, interviewer, exercise, sheet_file, db, as_json):
    """Rubric levels per leaf, notes, the feedback round (strength, improvement, revision outcome),
    and the overall recommendation (strong-no, no, yes, strong-yes) with its reason. A sheet that
    scores no rubric leaf is refused and nothing is saved."""
    from grader.sessions.calibration import calibrate
    from grader.sessions.live import exercise_view
    from grader.sessions.scoresheet import clean, interactive, read_file, sheet_from_data

    with _store(db) as store:
        s = store.session(session)
        data = read_file(sheet_file) if sheet_file else None
        slug = exercise or (data or {}).get("exercise")
        sx = store.exercise(s.id, slug)
        ev = exercise_view(store, s, sx)
        questions = [f.followup.question for f in ev.followups]
        who = clean(interviewer)
        if not who:
            raise click.UsageError("--interviewer is empty; give the interviewer's name")
        if data is not None:
            sheet = sheet_from_data(data, ev.rubric, s.id, sx.slug, who, questions, where=str(sheet_file))
        else:
            previous = next((sh for sh in ev.sheets if sh.interviewer == who), None)
            sheet = interactive(ev.rubric, s.id, sx.slug, who, questions,
                                ask=lambda text, default="": click.prompt(text, default=default, show_default=bool(default)),
                                say=console.info, previous=previous)
        store.save_sheet(sheet)
        cal = calibrate(ev.rubric, store.sheets(s.id, sx.slug))
        if as_json:
            console.emit_json({"session": s.id, "sheet": sheet.to_json(),
                               "scores": ev.rubric.score(sheet.level_map()), "calibration": cal.to_json()})
        else:
            show.sheet_saved(sheet, ev.rubric)
            show.calibration(cal, sx.slug)


@command.command("unscore")
@click.argument("session")
@click.option("--interviewer", required=True, help="Whose score sheet to delete.")
@click.option("--exercise", default=None, help="Which exercise (needed when the session has several).")
@db_option
@json_option
def unscore_cmd(session, interviewer, exercise, db, as_json):
    """Delete one interviewer's score sheet for one exercise. The deletion is recorded with what
    the sheet held (shown by `session show`); other sheets and the attempts are kept."""
    from grader.sessions.scoresheet import clean

    with _store(db) as store:
        s = store.session(session)
        sx = store.exercise(s.id, exercise)
        gone = store.delete_sheet(s.id, sx.slug, clean(interviewer))
        if as_json:
            console.emit_json({"session": s.id, "deleted": gone.to_json()})
        else:
            console.text(f"deleted {gone.interviewer}'s sheet for {gone.slug} "
                         f"(kept in the session's record of deletions)")


@command.command("feedback")
@click.argument("session")
@click.option("--exercise", default=None, help="Which exercise (needed when the session has several).")
@db_option
@json_option
def feedback_cmd(session, exercise, db, as_json):
    """Record that the feedback round was given now: it opens the revision window (the rubric's
    minutes). Attempts in it, or after it, are marked on the timeline."""
    from grader.sessions.live import exercise_rubric
    from grader.sessions.models import parse_time

    with _store(db) as store:
        s = store.session(session)
        sx = store.exercise(s.id, exercise)
        at = store.give_feedback(s.id, sx.slug)
        minutes = exercise_rubric(sx).feedback.revision_minutes
        if as_json:
            console.emit_json({"session": s.id, "exercise": sx.slug, "given_at": at, "minutes": minutes})
        else:
            offset = (parse_time(at) - parse_time(s.started_at)).total_seconds()
            console.text(f"feedback given for {sx.slug} at {show.mmss(offset)}: "
                         f"revision window open for {minutes} min")


@command.command("quiz")
@click.argument("session")
@click.option("--topic", default=None, help="Ask the questions of one topic.")
@click.option("--id", "ids", multiple=True, help="Ask this question (repeat for more).")
@click.option("--answer", "answers", multiple=True, metavar="ID=VALUE",
              help="Record an answer without asking (repeat for more); a unit may follow the number.")
@db_option
@json_option
def quiz_cmd(session, topic, ids, answers, db, as_json):
    """Quantitative questions in the session: each answer graded against the model answer with the
    question's tolerance and recorded; the live view and the debrief show them."""
    from grader.tools import quiz as Q

    with _store(db) as store:
        s = store.session(session)
        bank = Q.load_bank()
        given = dict(_pair(a) for a in answers)
        chosen = Q.select(bank, topic, tuple(ids) + tuple(given))
        out = []
        for q in chosen:
            while True:
                value = given.get(q.id)
                if value is None:
                    value = click.prompt(f"[{q.id}] {q.question} ({q.unit})" if q.unit else f"[{q.id}] {q.question}")
                try:
                    v = Q.grade_answer(q, value)
                    break
                except Q.AnswerError as e:
                    if q.id in given:
                        raise click.UsageError(f"--answer {q.id}={value}: {e}") from None
                    console.info(f"  {e}; try again")
            store.record_quiz_answer(s.id, q.id, str(value), v.to_json())
            out.append({"question": q.id, "answer": str(value), **v.to_json()})
            if not as_json:
                show.quiz_verdict(q, v)
        if as_json:
            console.emit_json({"session": s.id, "answers": out})


def _pair(text: str) -> tuple[str, str]:
    qid, sep, value = text.partition("=")
    if not sep or not qid.strip() or not value.strip():
        raise click.UsageError(f"--answer {text!r}: write it as ID=VALUE, e.g. dp-allreduce-bytes=12.5GB")
    return qid.strip(), value.strip()


@command.command("list")
@click.option("--open", "open_only", is_flag=True, help="Only sessions not yet closed.")
@db_option
@json_option
def list_cmd(open_only, db, as_json):
    """Every session in the database."""
    with _store(db) as store:
        sessions = store.sessions(open_only)
        counts = {s.id: len(store.attempts(s.id)) for s in sessions}
        if as_json:
            console.emit_json({"db": str(store.path),
                               "sessions": [{**s.to_json(), "attempts": counts[s.id]} for s in sessions]})
        else:
            show.session_list(sessions, counts)


@command.command("close")
@click.argument("session")
@db_option
@json_option
def close_cmd(session, db, as_json):
    """Stop the clock and keep the candidate's DIAGNOSIS.md in the store; later gradings are not recorded."""
    from grader.sessions.lifecycle import close_session

    with _store(db) as store:
        s = close_session(store, session)
        if as_json:
            console.emit_json(s.to_json())
        else:
            console.text(f"closed session {s.id} ({s.candidate}) after {show.mmss(s.elapsed_s())}")
