"""The hostile-submission suite's switches.

It takes about an hour (every case is a hostile grading and an honest one), so it runs only when
asked: ``make adversarial`` (``TRAINWRECK_ADVERSARIAL=1``); ``make test`` skips it and says why.

- ``TRAINWRECK_ADVERSARIAL=1``: run it.
- ``TRAINWRECK_ADVERSARIAL_UNISOLATED=1``: also run the cases that need the sandbox while grading
  has none, where the suite can contain them (``Case.unisolated_safe``), to measure what today's
  grader lets through. Their failures are the point; never on a machine you share unless you
  accept that.
- ``TRAINWRECK_ADVERSARIAL_LOG=PATH``: where each case's report goes (JSON lines); default
  ``.trainwreck/adversarial/<date-time>.jsonl`` in the kit. ``python -m tests.adversarial.figures``
  turns it into the README's table and figures.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import pytest

from tests.adversarial.grade_one import sandbox_option


def pytest_configure(config):
    config.addinivalue_line("markers", "adversarial: a hostile submission, graded for real (make adversarial)")
    config.addinivalue_line("markers", "needs_sandbox: stopped only by the sandbox of issue 11; skipped while "
                                       "grading runs without one")
    config.addinivalue_line("markers", "adversarial_ci: in CI's tier of the suite (make adversarial-ci)")
    from tests.adversarial.cases import SLUGS

    for klass, slug in SLUGS.items():
        config.addinivalue_line("markers", f"{slug}: hostile submissions of the class '{klass}'")


def sandbox_state() -> tuple[bool, str]:
    """Whether gradings run sandboxed here, and if not, why: grading must have a sandbox switch
    (``GradeOptions``) and bubblewrap must work on this machine (``harness.sandbox.probe``)."""
    forced = os.environ.get("TRAINWRECK_ADVERSARIAL_SANDBOX")
    if forced in ("wired", "unwired"):
        return forced == "wired", f"TRAINWRECK_ADVERSARIAL_SANDBOX={forced}"
    option = sandbox_option()
    if option is None:
        return False, ("grading does not sandbox yet: grader.grade.GradeOptions has no sandbox switch (the "
                       "wiring of issue 11 is not merged)")
    from harness import sandbox

    p = sandbox.probe()
    if not p.ok:
        return False, f"the grader would run without isolation here: {p.reason}"
    return True, f"sandboxed through GradeOptions.{option} ({p.mode} mode)"


@pytest.fixture(scope="session")
def sandbox():
    return sandbox_state()


@pytest.fixture(scope="session")
def suite_log() -> Path:
    path = os.environ.get("TRAINWRECK_ADVERSARIAL_LOG")
    if path:
        return Path(path)
    from grader.exercises import kit_root

    d = kit_root() / ".trainwreck" / "adversarial"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{datetime.now():%Y%m%d-%H%M%S}.jsonl"


def pytest_collection_modifyitems(config, items):
    if os.environ.get("TRAINWRECK_ADVERSARIAL") == "1":
        return
    skip = pytest.mark.skip(reason="the hostile-submission suite runs with `make adversarial` "
                                   "(TRAINWRECK_ADVERSARIAL=1; about an hour)")
    for item in items:
        if item.get_closest_marker("adversarial"):
            item.add_marker(skip)
