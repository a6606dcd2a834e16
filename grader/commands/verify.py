"""``trainwreck verify [SLUG...]``: the kit's self-check (rustlings' `dev check`): every broken
script fails the checks its manifest names, every reference solution passes."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import click

from grader import console
from grader.errors import EXIT_FAIL, EXIT_OK, UserError


@click.command("verify")
@click.argument("slugs", nargs=-1)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Where the gradings go (default .trainwreck/verify/<time>).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def command(slugs, device, out, as_json):
    """Prove every exercise (or SLUGS) fails as shipped and passes with its reference solution."""
    from grader.exercises import discover
    from grader.exercises import find_script as find
    from grader.verify import Verification, verify

    found, errors = discover()
    found = [e for e in found if e.kind == "script"]  # a design scenario has nothing to verify
    if slugs:
        found, errors = [find(s) for s in slugs], []
    if not found and not errors:
        raise UserError("no exercises found")
    out = (out or Path(".trainwreck") / "verify" / datetime.now().strftime("%Y%m%d-%H%M%S")).resolve()
    report = [Verification.unloadable(e) for e in errors]
    for ex in found:
        v = verify(ex, out / ex.slug, device=device, progress=console.info)
        report.append(v)
        if not as_json:
            console.verify_line(v)
    if as_json:
        console.emit_json({"exercises": [v.to_json() for v in report]})
    sys.exit(EXIT_OK if all(v.ok for v in report) else EXIT_FAIL)
