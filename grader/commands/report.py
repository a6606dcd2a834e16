"""``trainwreck report SESSION`` and ``trainwreck report --compare SESSION...``: the debrief, as one
self-contained HTML file or as Markdown, regenerated from the session store alone."""

from __future__ import annotations

import time
from pathlib import Path

import click

from grader import console
from grader.commands.session import db_option, json_option
from grader.sessions import console as show


@click.command("report")
@click.argument("sessions", nargs=-1, required=True)
@click.option("--compare", is_flag=True, help="Put the candidates of SESSIONS side by side on one exercise.")
@click.option("--exercise", default=None, help="The exercise to compare (needed when the sessions share several).")
@click.option("--format", "fmt", type=click.Choice(["html", "md"]), default=None,
              help="html (default, or from --out's suffix) or md.")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Where to write it (default: debrief-<session>.<format> in the current folder; - for stdout).")
@db_option
@json_option
def command(sessions, compare, exercise, fmt, out, db, as_json):
    """The debrief of SESSION: plots, the attempt timeline with diffs, every check with its evidence,
    rubric scores and calibration, the feedback round, notes, the written diagnosis, the follow-ups."""
    from grader.sessions.errors import SessionError
    from grader.sessions.store import Store

    if len(sessions) > 1 and not compare:
        raise SessionError(f"{len(sessions)} sessions given; give one, or add --compare to put them side by side")
    fmt = fmt or ("md" if out is not None and out.suffix == ".md" else "html")
    t0 = time.perf_counter()
    from grader.report import data, render

    with Store.open(db) as store:
        if compare:
            cmp = data.compare(store, list(sessions), exercise)
            text = render.render_compare(cmp, fmt)
            default = Path(f"compare-{cmp.slug}-{'-'.join(r.session.id for r in cmp.rows)}.{fmt}")
        else:
            rep = data.gather(store, sessions[0], with_pixels=fmt == "html")
            text = render.render(rep, fmt)
            default = Path(f"debrief-{rep.session.id}.{fmt}")
    seconds = time.perf_counter() - t0
    if out is not None and str(out) == "-":
        click.echo(text, nl=False)
        return
    path = (out or default).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    if as_json:
        console.emit_json({"report": str(path), "format": fmt, "bytes": path.stat().st_size,
                           "seconds": round(seconds, 3)})
    else:
        show.report_written(path, fmt, seconds)
