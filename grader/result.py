"""result.json: the hand-off from grading to reports and sessions (``schema_version`` 1)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.rundir import atomic_write_json

SCHEMA_VERSION = 1


def verdict(checks, throughput, s) -> dict[str, Any]:
    return {
        "passed": s.passed,
        "score": s.score,
        "environment_failure": s.environment_failure,
        "failed_required": s.gate,
        "issues": [i.to_json() for i in s.issues],  # per-issue verdicts; empty unless the manifest groups checks
        "checks": [c.to_json() for c in checks],
        "throughput": throughput.to_json() if throughput else None,
    }


def build(*, exercise, submission, checks, throughput, score, environment, timings, run_dirs,
          out_dir) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "exercise": exercise,
        "graded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "submission": {"kind": submission.kind, "source": str(submission.source),
                       "sha256": submission.sha256, "protected_changed": submission.protected_changed},
        **verdict(checks, throughput, score),
        "environment": environment,
        "timings": timings,
        "run_dirs": run_dirs,
        "out_dir": str(out_dir),
    }


def write(path: Path, result: dict[str, Any]) -> None:
    atomic_write_json(path, result)


def read(path: Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        path = path / "result.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: not found; give a result.json written by `trainwreck grade`") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {data.get('schema_version')!r}; this trainwreck reads "
                         f"{SCHEMA_VERSION}")
    return data
