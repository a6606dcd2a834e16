"""The kit's one base error. Everything a user can get wrong (a flag, a path, a manifest, a
workspace) raises a subclass; ``trainwreck``'s ``main()`` catches this base alone, prints its
one-line message and exits with ``EXIT_USAGE``. It lives in the harness, the lowest layer, so that
``harness`` and ``grader`` share it without the harness importing the grader."""

from __future__ import annotations

EXIT_OK = 0  # success: the job ran, the submission passed
EXIT_FAIL = 1  # the job or the submission failed (a verdict, not an error)
EXIT_USAGE = 2  # bad input or a broken environment: one line on stderr names the problem and the fix
EXIT_INTERRUPTED = 130  # Ctrl-C


class TrainwreckError(Exception):
    """An expected problem with the user's input or environment: one line, exit 2."""

    exit_code = EXIT_USAGE


class LaunchError(TrainwreckError):
    """A launch configuration or environment problem found before anything ran."""
