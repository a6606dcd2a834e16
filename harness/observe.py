"""Reading a run dir back into per-rank observations: pure functions over files, shared by the
launcher's summary and the grader (which re-reads, never re-runs)."""

from __future__ import annotations

import os
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
    location_kind: str | None = None  # what last_location is: "raised", "pending collective", "last collective"
    fault: dict[str, Any] | None = None  # the harness killed this rank on purpose (last attempt)
    last_collective: dict[str, Any] | None = None
    pending_collective: dict[str, Any] | None = None  # issued and never completed (or failed): the latest
    pending_collectives: list[dict[str, Any]] = field(default_factory=list)  # all of them, oldest first
    n_collectives: int = 0
    forged_lines: int = 0
    params_sha256: str | None = None
    n_params: int = 0  # the model's parameter elements (global, for sharded parameters)
    local_params: int = 0  # the elements this rank saved (its shards)
    shards: dict[str, Any] | None = None  # name -> global shape and offset of a sharded parameter
    losses: list[float | None] = field(default_factory=list)  # per step, last attempt (None: no scalar backward)

    def public(self) -> dict[str, Any]:
        """The summary of run.json and ``--json``: null where there is no data (a rank that never
        stepped has no rate and no peak RSS, not 0)."""
        d = asdict(self)
        for bulky in ("rss_mb", "cuda_alloc_mb", "step_times", "lr", "losses", "pending_collectives", "shards"):
            d.pop(bulky)
        if len(self.step_times) < 2:
            d["steps_per_s"] = None
        if not self.steps_total:
            d["peak_rss_mb"] = None
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
                # steps/s by the parent's clock where the record channel stamped its receive time: a
                # script that slows the clock in its own process cannot speed itself up
                step_ts.append(float(r.get("rt", r["t"])))
                obs.rss_mb.append(float(r.get("rss_mb", 0.0)))
                obs.step_times.append(float(r.get("dt", 0.0)))
                obs.lr.append(list(r.get("lr", [])))
                obs.losses.append(r.get("loss"))
                if "cuda_alloc_mb" in r:
                    obs.cuda_alloc_mb.append(float(r["cuda_alloc_mb"]))
        elif r.get("kind") == "exit" and r.get("attempt") == last:
            obs.exit_code = r.get("code")
            obs.exit_status = r.get("status")
            obs.exit_t = r.get("t")
            obs.error = r.get("error")
            obs.params_sha256 = r.get("params_sha256")
            obs.n_params = int(r.get("numel", 0))
            obs.local_params = int(r.get("local_numel", r.get("numel", 0)))
            obs.shards = r.get("shards")
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
            # the one issued last: a DDP bucket's completion is often seen after a later collective's
            # (at the next look at the open works), so the exit records' order is not the issue order
            if done and (obs.last_collective is None or done["seq"] > obs.last_collective["seq"]):
                obs.last_collective = done
        elif r.get("ph") == "error":
            failed = entered.pop(r["seq"], None)
            if failed:
                obs.pending_collective = {**failed, "error": r.get("err")}
    if entered:  # issued and never completed: what the rank was waiting for when it stopped
        obs.pending_collectives = [entered[s] for s in sorted(entered)]
        on_main = [s for s in entered if entered[s].get("main", True)]
        obs.pending_collective = entered[max(on_main or entered)]
    raised = raised_at(obs.error)
    if raised:
        obs.last_location, obs.location_kind = raised, "raised"
    elif obs.pending_collective:
        obs.last_location = obs.pending_collective.get("site")
        obs.location_kind = "failed collective" if "error" in obs.pending_collective else "pending collective"
    elif obs.last_collective:
        obs.last_location, obs.location_kind = obs.last_collective.get("site"), "last collective"
    return obs


# traceback: '  File "/path/x.py", line 12, in fn'
_TB_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in ')


def raised_at(traceback_text: str | None) -> str | None:
    """``file:line`` of the innermost frame of the user's code in a formatted traceback."""
    site = None
    for line in (traceback_text or "").splitlines():
        m = _TB_FRAME.match(line)
        if m and not is_library_path(m["file"]):
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
        if script_files is None and not is_library_path(f):
            site = f"{f}:{ln}"
            break
    return {"site": site, "frames": [f"{f}:{ln} in {fn}" for f, ln, fn in main]}


_HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))
_HARNESS_MODULES = frozenset(n for n in os.listdir(_HARNESS_DIR) if n.endswith(".py"))


def is_library_path(path: str) -> bool:
    """torch, the stdlib, installed packages, or this harness (here, or a copy of it elsewhere: a
    file named like one of its modules in a folder named ``harness``). A project checked out in a
    folder that happens to be called ``harness`` is still the user's code."""
    if "site-packages" in path or "/lib/python3" in path or path.startswith("<"):
        return True
    if path.startswith(_HARNESS_DIR + os.sep):
        return True
    parent, name = os.path.split(path)
    return os.path.basename(parent) == "harness" and name in _HARNESS_MODULES
