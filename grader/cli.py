"""The ``trainwreck`` command: a click group whose commands live one per module in
``grader/commands/`` and are imported only when invoked (click's lazy-loading pattern), so
`trainwreck run` never pays for the grading modules or pydantic.

``main()`` is the one place that turns errors into exit codes: a ``TrainwreckError`` (bad input, a
broken environment) is one line on stderr and exit 2; anything else is a bug, reported as one line
too, with the traceback only under ``--debug`` (or ``TRAINWRECK_DEBUG=1``)."""

from __future__ import annotations

import importlib
import os
import sys

import click

from grader import console
from grader.errors import EXIT_INTERRUPTED, EXIT_USAGE, TrainwreckError

# command name -> module under grader.commands; each module defines `command`
COMMANDS = {
    "list": "list",
    "show": "show",
    "start": "start",
    "run": "run",
    "grade": "grade",
    "watch": "watch",
    "hint": "hint",
    "solution": "solution",
    "reset": "reset",
    "regrade": "regrade",
    "verify": "verify",
    "record": "record",
    "demo": "demo",
    "session": "session",
    "report": "report",
    "bundle": "bundle",
    "calc": "calc",
    "quiz": "quiz",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMANDS.get(name)
        if module is None:
            return None
        return importlib.import_module(f"grader.commands.{module}").command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="TRAINWRECK_DEBUG", help="Show tracebacks.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """trainwreck: broken distributed-training exercises, a harness that watches every rank, and a grader."""
    ctx.obj = {"debug": debug}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    debug = os.environ.get("TRAINWRECK_DEBUG") == "1" or "--debug" in args
    try:
        cli.main(args=args, standalone_mode=False, prog_name="trainwreck")
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        console.error("aborted")
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as e:
        console.error(e.format_message() + _usage_hint(e))
        sys.exit(EXIT_USAGE)
    except TrainwreckError as e:
        if debug:
            raise
        console.error(str(e))
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        console.error("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:  # an environment failure or a bug in trainwreck, not the user's input
        if debug:
            raise
        console.error(f"internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)")
        sys.exit(EXIT_USAGE)


def _usage_hint(e: click.ClickException) -> str:
    ctx = getattr(e, "ctx", None)
    return f" (see `{ctx.command_path} --help`)" if ctx is not None else ""


if __name__ == "__main__":
    main()
