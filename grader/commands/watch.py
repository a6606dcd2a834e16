"""``trainwreck watch``: inside a practice workspace, grade the exercise now and again on every save
of an editable file, showing each check's verdict and what it observed; a save while a grading
runs cancels it (every rank ended) and starts a new one. On a terminal it takes single keys, as
rustlings does: h the next hint, l the exercises, g grade now, q quit; after each grading it says how
many exercises have passed (n of N). Ctrl-C (or SIGTERM) stops watching, cancelling the grading in
flight, and exits 0."""

from __future__ import annotations

import sys

import click

from grader import console
from grader.commands._options import device_option
from grader.commands._practice import workspace_option
from grader.practice import console as show
from grader.practice.keys import KEYS, single_keys
from harness.executor import executor_for


@click.command("watch")
@click.option("--max-runs", type=click.IntRange(min=1), default=None,
              help="Stop after this many finished gradings (cancelled ones do not count).")
@click.option("--repeats", type=click.IntRange(min=1), default=None, help="Throughput rounds (default: the manifest's).")
@device_option
@click.option("--no-clear", is_flag=True, help="Do not clear the terminal before each grading.")
@click.option("--verbose", "-v", is_flag=True,
              help="Each check's whole evidence (what it observed), not one line per check.")
@workspace_option
@click.option("--json", "as_json", is_flag=True, help="Print each event as one JSON object per line on stdout.")
@click.option("--no-sandbox", "no_sandbox", is_flag=True,
              help="Run the graded code without the bubblewrap sandbox (unisolated: only where the sandbox cannot run; "
                   "result.json and every report say so).")
def command(max_runs, repeats, device, no_clear, verbose, workspace, as_json, no_sandbox):
    """Grade this workspace on every save of its editable files, until q or Ctrl-C.

    Each grading runs in a child process; a save while one runs cancels it (its ranks are ended)
    and grades the new version. A save that changes nothing starts nothing. On a terminal, single
    keys: h the next hint, l the exercises, g grade now, q quit. After each grading: n of N
    exercises passed.
    """
    from grader.practice import grading, watch
    from grader.practice.workspace import editable, open_workspace
    from grader.submission import files_digest

    executor = executor_for(sandboxed=not no_sandbox)
    ws = open_workspace(workspace)
    names = editable(ws.require_script("watch"))

    def digest() -> str | None:
        if not all((ws.root / n).is_file() for n in names):
            return None
        return files_digest(ws.root, names)

    last = ws.state.last_view
    clear = not no_clear and console.out.is_terminal
    with grading.sigterm_interrupts(), single_keys(None if as_json else sys.stdin) as keys:
        # SIGTERM stops watching as Ctrl-C does: the grading in flight is cancelled
        emit = console.emit_json_line if as_json else _shown(ws, clear, keys is not None, verbose)
        watch.run(names, digest, lambda n: grading.spawn(ws, device=device, repeats=repeats, executor=executor),
                  watch.file_changes(ws.root, names), emit, max_runs=max_runs,
                  last=(last["sha256"], last["view"]) if last and "sha256" in last and "view" in last else None,
                  keys=keys)


def _shown(ws, clear: bool, keys: bool, verbose: bool = False):
    """Each event as watch prints it; after a grading, how many exercises have passed (n of N); the
    keys h (the next hint) and l (the exercises, one line each) answered here."""
    from grader.commands import list as listing
    from grader.practice.state import PracticeError
    from grader.sessions.errors import SessionError
    from grader.sessions.reveals import hints  # recorded in (or refused by) an open interview session

    def emit(ev: dict) -> None:
        kind = ev["event"]
        if kind == "key":
            try:
                if ev["key"] == "h":
                    show.hints(hints(ws, unfold=True), listing=False)
                elif ev["key"] == "l":
                    listing.print_list(as_json=False)
                else:
                    console.info(f"keys: {', '.join(f'{k} {what}' for k, what in KEYS.items())}")
            except (PracticeError, SessionError) as e:
                console.error(str(e))
            return
        show.watch_event(ev, clear, keys, verbose)
        if kind in ("result", "unchanged"):
            show.passed_line(*listing.passed_count())

    return emit
