"""``trainwreck bundle SLUG... --out PATH`` or ``trainwreck bundle --session ID --out PATH``: the
folder (or .tar.gz) sent to a candidate: briefs, broken scripts, logs, baselines, the harness with
a launcher, and a self-check; no solutions, hints, notes, rubrics or hidden thresholds. A
session's bundle carries that session's exercises and a ``submit.py`` whose archive `trainwreck
session import` records as an attempt."""

from __future__ import annotations

from pathlib import Path

import click

from grader import console
from grader.commands.session import db_option, json_option
from grader.errors import UserError
from grader.sessions import console as show


@click.command("bundle")
@click.argument("slugs", nargs=-1)
@click.option("--session", "session_ref", default=None, metavar="ID",
              help="Bundle this open session's exercises, with submit.py for the candidate's remote attempts.")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="A new folder, or a path ending in .tar.gz for an archive.")
@db_option
@json_option
def command(slugs, session_ref, out, db, as_json):
    """Make the candidate bundle for exercises SLUGS, or for the session ID (--session)."""
    from grader.bundle.build import build

    session_id = None
    if session_ref is not None:
        if slugs:
            raise UserError("give exercise SLUGS or --session ID, not both (a session's bundle holds its exercises)")
        from grader.sessions.store import Store

        with Store.open(db) as store:
            s = store.session(session_ref)
            if s.closed:
                raise UserError(f"session {s.id} was closed at {s.closed_at}; its attempts can no longer be "
                                "imported: open a new one with `trainwreck session new`")
            session_id, slugs = s.id, [sx.slug for sx in store.exercises(s.id)]
    elif not slugs:
        raise UserError("name the exercise SLUGS to bundle, or --session ID for an interview's (see `trainwreck list`)")
    res = build(list(slugs), out, session_id)
    if as_json:
        console.emit_json({**res.to_json(), "session": session_id})
    else:
        show.bundle_written(res)
        if session_id:
            console.text(f"session {session_id}: the candidate hands in with `python submit.py SLUG`;")
            console.text(f"record each archive with `trainwreck session import {session_id} FILE`")
