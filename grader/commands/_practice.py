"""What the practice commands (`start`, `hint`, `watch`, `solution`, `reset`, and `grade` / `run`
inside a workspace) share: the ``--workspace`` option and the confirmation of a step that cannot be
taken back. Not a command itself (``grader.cli`` lists the commands)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from grader.practice.state import PracticeError

workspace_option = click.option(
    "--workspace", type=click.Path(path_type=Path, file_okay=False), default=None,
    help="The practice workspace (default: the one holding the current folder).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")


def confirm(question: str, yes: bool, flag: str = "--yes") -> None:
    """Ask on the terminal (no: aborted, exit 130); without a terminal, ``flag`` must be given."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise PracticeError(f"{question.rstrip('?')}: no terminal to confirm on; add {flag} to confirm")
    click.confirm(question, default=False, abort=True, err=True)
