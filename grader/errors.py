"""The grader's expected errors, all subclasses of the kit's one base error
(``harness.errors.TrainwreckError``), which ``trainwreck``'s ``main()`` catches: one line on stderr
that names the problem and the fix, exit code 2. Modules raise these; only the CLI prints them.

This module imports nothing heavy, so the `run` command's import path stays free of pydantic and
of the grading modules."""

from __future__ import annotations

from harness.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, LaunchError, TrainwreckError


class UserError(TrainwreckError):
    """A flag, a path or an argument that cannot be used as given."""


class ManifestError(TrainwreckError):
    """One line: ``<file>: <field>: <problem>; <fix>``."""


class RubricError(TrainwreckError):
    """One line: ``<file>: <field>: <problem>; <fix>``."""


class SubmissionError(TrainwreckError):
    """The workspace cannot be graded as given."""


__all__ = ["EXIT_FAIL", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "LaunchError", "ManifestError",
           "RubricError", "SubmissionError", "TrainwreckError", "UserError"]
