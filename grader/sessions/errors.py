"""The sessions' expected errors: one line naming the problem and the fix (exit 2)."""

from __future__ import annotations

try:  # the kit's one error base, once the CLI restructuring lands
    from grader.errors import TrainwreckError
except ImportError:  # pragma: no cover - until then: click's own error prints one line and exits 2
    import click

    class TrainwreckError(click.ClickException):  # type: ignore[no-redef]
        exit_code = 2


class SessionError(TrainwreckError):
    """A session, workspace or score sheet that cannot be used as given."""
