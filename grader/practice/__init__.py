"""Self-practice from the command line: a workspace per exercise (``trainwreck start``), and inside
it ``grade``, ``run``, ``hint``, ``watch``, ``solution`` and ``reset`` without naming the exercise.

- ``state``: the state file at the workspace root (the marker that makes a folder a practice
  workspace, and the progress kept between sessions), the workspace's attempts in the one attempt
  store (``grader.attempts``, a file beside it), and the registry of workspaces under
  ``user_home()`` that ``trainwreck list`` reads. Light: json, pathlib and sqlite3 only, so
  ``trainwreck run`` can find its workspace without pydantic.
- ``workspace``: making one (the interview workspace's contents), finding the exercise, hints, the
  solution's diff, reset with a backup.
- ``grading``: a grading of the workspace recorded as an attempt, what practice shows of it (the
  checks' messages, never their thresholds or evidence dicts), and a grading in a child process
  that can be cancelled with nothing left running.
- ``watch``: re-grade on every save of an editable file, cancelling a grading in flight.
- ``console``: what practice prints, through ``grader.console``.
"""
