"""`trainwreck watch --json` in a process of its own, with the stand-in gradings of practice_fakes
(grading 1 never finishes), for a test that stops it with a real signal. Run in the workspace as
``python watch_child.py JOBS_JSON``; on the way out it writes, for each grading it started, whether
that grading was cancelled, to JOBS_JSON. Its exit status is the real CLI's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grader.cli import main
from grader.practice import grading
from tests.grader.commands.practice_fakes import FakeGrader

if __name__ == "__main__":
    fake = FakeGrader(hold=(1,))
    grading.spawn = fake  # looked up on each grading by `trainwreck watch`
    try:
        main(["watch", "--json"])
    finally:
        Path(sys.argv[1]).write_text(json.dumps([job.cancelled for job in fake.jobs]))
