"""``trainwreck bundle SLUG... --out PATH``: the folder (or .tar.gz) sent to a candidate: briefs,
broken scripts, logs, baselines, the harness with a launcher, and a self-check; no solutions,
hints, notes, rubrics or hidden thresholds."""

from __future__ import annotations

from pathlib import Path

import click

from grader import console
from grader import console_sessions as show
from grader.commands.session import json_option


@click.command("bundle")
@click.argument("slugs", nargs=-1, required=True)
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="A new folder, or a path ending in .tar.gz for an archive.")
@json_option
def command(slugs, out, as_json):
    """Make the candidate bundle for exercises SLUGS."""
    from grader.bundle.build import build

    res = build(list(slugs), out)
    if as_json:
        console.emit_json(res.to_json())
    else:
        show.bundle_written(res)
