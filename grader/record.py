"""``trainwreck record``: run an exercise's broken script through the harness and keep what it
showed as the exercise's ``logs/`` and ``baseline.json``. Nothing in them is written by hand; the
paths in them are a neutral machine's, and tracebacks leave the harness's frames out
(``grader.neutral``), so they read as the job's own logs from a container."""

from __future__ import annotations

import csv
import importlib.metadata
import io
import os
import platform
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader.checks.memory_flat import slope
from grader.exercises import KIT_ROOT, Exercise
from grader.grade import plan, run_role
from grader.neutral import Neutral
from grader.roles import Role, RunRequest
from harness import rundir
from harness.observe import median_step_s

BASELINE = "baseline.json"
LOGS = "logs"
METRICS = "metrics.csv"  # in logs/: per rank and step, what a monitoring dashboard would show
METRICS_COLUMNS = ("rank", "attempt", "step", "time_s", "step_ms", "rss_mb", "cuda_alloc_mb", "lr")


def script_sha256(ex: Exercise) -> str:
    return rundir.sha256_file(ex.script)


def record(ex: Exercise, device: str = "auto", progress=lambda s: None) -> dict[str, Any]:
    m = ex.manifest
    with tempfile.TemporaryDirectory(prefix=f"trainwreck-record-{m.slug}-") as tmp:
        run_dir = Path(tmp) / "run"
        # Where grading kills and restarts the job, so does the recording: the restart is the symptom.
        req = plan(m).runs.get(Role.RESUME) or RunRequest(Role.MAIN, m.world_size)
        progress(f"running the broken {m.slug} at world size {m.world_size}"
                 + (" (killed and restarted once)" if req.faults else ""))
        load = os.getloadavg()[0]  # before the run: how busy the machine was that the figures come from
        ev = run_role(ex, ex.dir, run_dir, "broken", device, **req.launch_settings(), overflow=False)
        neutral = Neutral(ex.dir, KIT_ROOT, run_dir, entry=m.entry)
        baseline = neutral.value(_baseline(ex, ev, load))
        staged = ex.dir / f".{LOGS}.new"
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir()
        for r in sorted(ev.ranks):
            for name in (rundir.STDOUT, rundir.STDERR):
                src = rundir.rank_dir(run_dir, r) / name
                if src.exists():
                    _copy(src, staged / f"rank{r}.{name}", neutral)
        (staged / METRICS).write_text(metrics_csv(ev), encoding="utf-8")
        for name in ("hang.txt", "launcher.log"):
            if (run_dir / name).exists():
                _copy(run_dir / name, staged / name, neutral)
        # Swap whole: the old logs stay until the new ones are complete.
        old = ex.dir / f".{LOGS}.old"
        shutil.rmtree(old, ignore_errors=True)
        if (ex.dir / LOGS).exists():
            os.replace(ex.dir / LOGS, old)
        os.replace(staged, ex.dir / LOGS)
        shutil.rmtree(old, ignore_errors=True)
        rundir.atomic_write_json(ex.dir / BASELINE, baseline)
    return baseline


def _copy(src: Path, dst: Path, neutral: Neutral) -> None:
    dst.write_text(neutral.text(src.read_text(encoding="utf-8", errors="replace")), encoding="utf-8")


def metrics_csv(ev) -> str:
    """Every rank's step records as CSV: seconds since the job's first record, the step's wall time,
    RSS, CUDA memory where recorded, and the learning rate of each param group (``;``-separated).
    Only the bootstrap's signed records count: nothing the script printed gets in."""
    events = {r: ev.events(r) for r in sorted(ev.ranks)}
    t0 = min((float(e["t"]) for recs in events.values() for e in recs if "t" in e), default=0.0)
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(METRICS_COLUMNS)
    for r, recs in events.items():
        for e in recs:
            if e.get("kind") != "step":
                continue
            cuda = e.get("cuda_alloc_mb")
            out.writerow([r, e.get("attempt", 0), e.get("step"), f"{float(e['t']) - t0:.3f}",
                          f"{float(e.get('dt', 0.0)) * 1000:.2f}", f"{float(e.get('rss_mb', 0.0)):.1f}",
                          "" if cuda is None else f"{float(cuda):.1f}",
                          ";".join(f"{x:.6g}" for x in e.get("lr", []))])
    return buf.getvalue()


def _baseline(ex: Exercise, ev, load: float | None = None) -> dict[str, Any]:
    m = ex.manifest
    ranks = {}
    for r, o in sorted(ev.ranks.items()):
        mem = o.cuda_alloc_mb or o.rss_mb
        warm = mem[10:] if len(mem) > 30 else mem
        ranks[str(r)] = {
            "exit_code": o.exit_code, "steps": o.steps, "steps_per_s": round(o.steps_per_s, 2),
            "median_step_ms": round(median_step_s(o) * 1000, 3),
            "peak_rss_mb": round(o.peak_rss_mb, 1),
            "memory_slope_mb_per_step": round(slope(warm), 4) if len(warm) > 1 else None,
            "first_lr": o.lr[0] if o.lr else None, "last_lr": o.lr[-1] if o.lr else None,
            "last_location": o.last_location,
        }
    try:
        torch_v = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_v = None
    return {
        "exercise": m.slug,
        "script": m.entry,
        "script_sha256": script_sha256(ex),
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": f"trainwreck record {m.slug}",
        "status": ev.status,
        "restarts": max((o.attempts for o in ev.ranks.values()), default=1) - 1,
        "wall_s": ev.run.get("wall_s"),
        "world_size": ev.world_size,
        "device": ev.run.get("device"),
        "backend": ev.backend,
        "torch": torch_v,
        "machine": {"platform": platform.platform(), "processor": platform.machine(),
                    "cpu_count": os.cpu_count(), "python": platform.python_version(),
                    "load_before": round(load, 2) if load is not None else None},
        "ranks": ranks,
        "hang": ev.run.get("hang"),
        "failure": ev.run.get("failure"),
    }


def load_baseline(ex: Exercise) -> dict[str, Any] | None:
    import json

    path = ex.dir / BASELINE
    return json.loads(path.read_text()) if path.exists() else None
