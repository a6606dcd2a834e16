"""``trainwreck record SLUG``: run an exercise's broken script and keep its logs/ and baseline.json
(kit authors; nothing in them is ever written by hand)."""

from __future__ import annotations

import click

from grader import console
from grader.commands._options import device_option


@click.command("record")
@click.argument("slug")
@device_option
def command(slug, device):
    """Run the broken script of SLUG and keep its logs/ and baseline.json in the exercise folder."""
    from grader.exercises import find_script as find
    from grader.record import record

    ex = find(slug)
    baseline = record(ex, device=device, progress=console.info)
    console.text(f"recorded {slug}: status {baseline['status']}, {baseline['world_size']} ranks on "
                 f"{baseline['device']} ({baseline['backend']}), torch {baseline['torch']} → "
                 f"{ex.dir / 'logs'}, {ex.dir / 'baseline.json'}")
