"""Stand-ins for practice tests: a grading that launches nothing, and watch's grading jobs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from grader.practice.grading import Cancelled, Outcome
from grader.result import GradeResult
from grader.submission import files_digest
from tests.grader.sessions.fakes import result

HIDDEN = 0.0123456  # a figure only the evidence holds: practice must never print it


def fake_grading(monkeypatch, passed: dict[str, bool], throughput: bool = False, calls: list | None = None):
    """`grader.grade.grade` replaced by a result with checks ``passed`` and a hidden figure in each
    check's evidence; the submission's digest is the real one of the graded files."""
    def grade(ex, opts, progress=lambda s: None):
        data = result(ex.slug, passed, throughput)
        for c in data["checks"]:
            c["evidence"] = {"max_slope_mb_per_step": HIDDEN, "reference_path": str(ex.solution_dir)}
        data["submission"]["sha256"] = files_digest(Path(opts.workspace), list(ex.manifest.editable))
        data["run_dirs"] = {"main": str(opts.out_dir / "runs" / "main")}
        data["out_dir"] = str(opts.out_dir)
        if calls is not None:
            calls.append(opts)
        return GradeResult.model_validate(data)

    monkeypatch.setattr("grader.grade.grade", grade)


def view(n: int, passed: bool = False) -> dict:
    """What `trainwreck grade --json` prints in a workspace, as a grading job hands it to watch."""
    return {"exercise": "memory-leak", "workspace": "/ws", "attempt": n, "passed": passed, "score": 0.0,
            "environment_failure": False, "issues": [], "throughput": None, "run_dir": None, "seconds": 1.0,
            "hints": {"seen": 0, "total": 3}, "passed_before": False,
            "checks": [{"name": "memory_flat", "passed": passed, "required": True, "environment": False,
                        "message": f"host RSS grows 2.1 MB per step (grading {n})"}]}


class FakeJob:
    """A grading that finishes at once, or (``hold``) only when cancelled."""

    def __init__(self, n: int, hold: bool, error: str | None = None):
        self.n, self.hold, self.error = n, hold, error
        self.cancelled = False
        self.reported = threading.Event()  # its outcome was taken: watch has shown it
        self._lines = [f"running main (fake grading {n})"]

    def poll(self) -> bool:
        return not self.hold

    def new_lines(self) -> list[str]:
        out, self._lines = self._lines, []
        return out

    def outcome(self) -> Outcome:
        self.reported.set()
        return Outcome(2, None, self.error) if self.error else Outcome(1, view(self.n), None)

    def cancel(self) -> Cancelled:
        self.cancelled = True
        return Cancelled(0.01, 0)


class FakeGrader:
    """Replaces ``grader.practice.grading.spawn``; ``hold`` lists the gradings that never finish,
    ``errors`` those that fail before grading, with their one-line error."""

    def __init__(self, hold: tuple[int, ...] = (), errors: dict[int, str] | None = None):
        self.hold, self.errors = hold, errors or {}
        self.jobs: list[FakeJob] = []

    def __call__(self, ws, device: str = "auto", repeats: int | None = None, executor=None) -> FakeJob:
        n = len(self.jobs) + 1
        job = FakeJob(n, hold=n in self.hold, error=self.errors.get(n))
        self.jobs.append(job)
        return job


TW = [sys.executable, "-m", "grader.cli"]


def marked_workspace(slug: str, ws: Path, home: Path) -> dict[str, str]:
    """A practice workspace made by `trainwreck start`, its script marked to print 'workspace copy
    ran' (so a test can tell which script a launch ran); returns the environment to run it with."""
    env = {**os.environ, "TRAINWRECK_HOME": str(home)}
    subprocess.run([*TW, "start", slug, "--dir", str(ws)], env=env, check=True, capture_output=True)
    (ws / "train.py").write_text((ws / "train.py").read_text() + "\nprint('workspace copy ran')\n")
    return env
