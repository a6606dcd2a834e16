"""The per-step figures a debrief plots, taken from a grading's run dirs when the attempt is
recorded and stored with it, so reports regenerate from the database alone (run dirs and the
reference cache may be cleaned up long before a hiring committee meets).

Records are read through ``grader.evidence.load_run``, which counts only signed lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader.evidence import EnvironmentFailure, load_run

ROLES = ("main", "reference")  # the candidate's run, and the reference solution's (when the grading had one)


def _r(x: Any, nd: int = 6) -> float | None:
    try:
        return round(float(x), nd)
    except (TypeError, ValueError):
        return None


def rank_series(events: list[dict[str, Any]]) -> dict[str, list]:
    """Per-step figures of a rank's last attempt: step, dt (s), rss_mb, cuda_alloc_mb, loss."""
    attempts = [int(e.get("attempt", 0)) for e in events if e.get("kind") == "step"]
    last = max(attempts) if attempts else 0
    out: dict[str, list] = {"step": [], "dt": [], "rss_mb": [], "cuda_alloc_mb": [], "loss": []}
    for e in events:
        if e.get("kind") != "step" or int(e.get("attempt", 0)) != last:
            continue
        out["step"].append(int(e.get("step", len(out["step"]) + 1)))
        out["dt"].append(_r(e.get("dt")))
        out["rss_mb"].append(_r(e.get("rss_mb"), 3))
        out["cuda_alloc_mb"].append(_r(e.get("cuda_alloc_mb"), 3))
        out["loss"].append(_r(e.get("loss")))
    for k in ("cuda_alloc_mb", "loss"):
        if all(v is None for v in out[k]):
            out[k] = []  # not recorded (CPU run; a harness without loss capture)
    return out


def run_series(role: str, run_dir: Path) -> dict[str, Any]:
    ev = load_run(role, run_dir)
    return {"status": ev.status, "world_size": ev.world_size, "device": ev.run.get("device"),
            "ranks": {str(r): rank_series(ev.events(r)) for r in sorted(ev.ranks)}}


def extract(result: dict[str, Any]) -> dict[str, Any]:
    """Series per role for the roles the report plots; a run that cannot be read says why."""
    out: dict[str, Any] = {}
    for role in ROLES:
        d = (result.get("run_dirs") or {}).get(role)
        if not d:
            continue
        try:
            out[role] = run_series(role, Path(d))
        except (EnvironmentFailure, OSError, ValueError) as e:
            out[role] = {"error": str(e)}
    return out
