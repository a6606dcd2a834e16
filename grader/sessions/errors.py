"""The sessions' expected errors: one line naming the problem and the fix (exit 2)."""

from __future__ import annotations

from grader.errors import TrainwreckError


class SessionError(TrainwreckError):
    """A session, workspace or score sheet that cannot be used as given."""
