"""Reading a run dir back into per-rank observations: pure functions over files, shared by the
launcher's summary and the grader (which re-reads, never re-runs)."""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness import rundir

# Steps excluded from rates: the first steps pay for lazy init, allocator growth and warm caches.
WARMUP_STEPS = 2


@dataclass
class RankObservation:
    rank: int
    attempts: int = 0
    exit_code: int | None = None
    exit_status: str | None = None
    exit_t: float | None = None  # wall time of the exit record: who failed first
    error: str | None = None
    steps: int = 0  # iterations in the last attempt (GradScaler-skipped steps included)
    steps_total: int = 0  # over every attempt
    steps_per_s: float = 0.0
    peak_rss_mb: float = 0.0
    rss_mb: list[float] = field(default_factory=list)  # per step, last attempt
    cuda_alloc_mb: list[float] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)  # seconds per step, last attempt
    lr: list[list[float]] = field(default_factory=list)
    last_location: str | None = None  # where the rank raised, else its pending or last collective
    fault: dict[str, Any] | None = None  # the harness killed this rank on purpose (last attempt)
    last_collective: dict[str, Any] | None = None
    pending_collective: dict[str, Any] | None = None  # entered, and never returned or raised
    n_collectives: int = 0
    forged_lines: int = 0
    params_sha256: str | None = None
    n_params: int = 0

    def public(self) -> dict[str, Any]:
        d = asdict(self)
        for bulky in ("rss_mb", "cuda_alloc_mb", "step_times", "lr"):
            d.pop(bulky)
        return d


def observe_rank(run_dir: Path, rank: int, key: str | None) -> RankObservation:
    obs = RankObservation(rank=rank)
    rdir = rundir.rank_dir(run_dir, rank)
    ev = rundir.read_records(rdir / rundir.EVENTS, key)
    col = rundir.read_records(rdir / rundir.COLLECTIVES, key)
    obs.forged_lines = ev.forged + col.forged
    attempts = sorted({int(r.get("attempt", 0)) for r in ev.valid})
    obs.attempts = len(attempts)
    last = attempts[-1] if attempts else 0
    step_ts: list[float] = []
    for r in ev.valid:
        if r.get("kind") == "step":
            obs.steps_total += 1
            obs.peak_rss_mb = max(obs.peak_rss_mb, float(r.get("rss_mb", 0.0)))
            if r.get("attempt") == last:
                obs.steps += 1
                step_ts.append(float(r["t"]))
                obs.rss_mb.append(float(r.get("rss_mb", 0.0)))
                obs.step_times.append(float(r.get("dt", 0.0)))
                obs.lr.append(list(r.get("lr", [])))
                if "cuda_alloc_mb" in r:
                    obs.cuda_alloc_mb.append(float(r["cuda_alloc_mb"]))
        elif r.get("kind") == "exit" and r.get("attempt") == last:
            obs.exit_code = r.get("code")
            obs.exit_status = r.get("status")
            obs.exit_t = r.get("t")
            obs.error = r.get("error")
            obs.params_sha256 = r.get("params_sha256")
            obs.n_params = int(r.get("numel", 0))
        elif r.get("kind") == "fault" and r.get("attempt") == last:
            obs.fault = {k: r.get(k) for k in ("what", "step", "t")}
    obs.steps_per_s = rate(step_ts)
    entered: dict[int, dict[str, Any]] = {}
    for r in col.valid:
        if r.get("a") != last:
            continue
        if r.get("ph") == "enter":
            entered[r["seq"]] = r
            obs.n_collectives += 1
        elif r.get("ph") == "exit":
            done = entered.pop(r["seq"], None)
            if done:
                obs.last_collective = done
        elif r.get("ph") == "error":
            failed = entered.pop(r["seq"], None)
            if failed:
                obs.pending_collective = {**failed, "error": r.get("err")}
    if entered:  # entered and never left: blocked there when the rank was stopped
        obs.pending_collective = entered[max(entered)]
    blocked = obs.pending_collective or obs.last_collective
    obs.last_location = raised_at(obs.error) or (blocked.get("site") if blocked else None)
    return obs


# traceback: '  File "/path/x.py", line 12, in fn'
_TB_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in ')


def raised_at(traceback_text: str | None) -> str | None:
    """``file:line`` of the innermost frame of the user's code in a formatted traceback."""
    site = None
    for line in (traceback_text or "").splitlines():
        m = _TB_FRAME.match(line)
        if m and not _is_library(m["file"]):
            site = f"{m['file']}:{m['line']}"
    return site


def rate(timestamps: list[float]) -> float:
    """Steps per second over the steps after warm-up (0 when too few to tell)."""
    ts = timestamps[WARMUP_STEPS:] if len(timestamps) > WARMUP_STEPS + 1 else timestamps
    if len(ts) < 2 or ts[-1] <= ts[0]:
        return 0.0
    return (len(ts) - 1) / (ts[-1] - ts[0])


def median_step_s(obs: RankObservation) -> float:
    times = obs.step_times[WARMUP_STEPS:] or obs.step_times
    return statistics.median(times) if times else 0.0


# faulthandler: 'File "/path/x.py", line 12 in fn'
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<fn>\S+)')


def parse_stacks(text: str, script_files: set[str] | None = None) -> dict[str, Any]:
    """The main thread's stack from a faulthandler dump, and the innermost frame of the user's
    code in it. The main thread is the one running the bootstrap (runpy frames below it)."""
    threads: list[list[tuple[str, int, str]]] = []
    for line in text.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            threads.append([])
        else:
            m = _FRAME.match(line)
            if m and threads:
                threads[-1].append((m["file"], int(m["line"]), m["fn"]))
    main = next((t for t in threads if any(f.endswith("harness/bootstrap.py") for f, _, _ in t)),
                threads[0] if threads else [])
    site = None
    for f, ln, _fn in main:  # most recent call first
        if script_files is not None and f in script_files:
            site = f"{f}:{ln}"
            break
        if script_files is None and not _is_library(f):
            site = f"{f}:{ln}"
            break
    return {"site": site, "frames": [f"{f}:{ln} in {fn}" for f, ln, fn in main]}


def _is_library(path: str) -> bool:
    return ("site-packages" in path or "/lib/python3" in path or path.endswith("harness/bootstrap.py")
            or "/harness/" in path or path.startswith("<"))
