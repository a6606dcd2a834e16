"""The hang report: when no rank has made progress, ask every rank where it is.

Each rank's bootstrap registered faulthandler on SIGUSR1, writing all threads' stacks to its own
``stacks.txt``. We note each file's size, signal the ranks, wait for the dumps, and combine them
with the last collective each rank entered (from its trace) into ``hang.json`` and ``hang.txt``.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from harness import rundir
from harness.monitor import Monitor
from harness.observe import observe_rank, parse_stacks

STACK_WAIT_S = 4.0


def collect_hang(run_dir: Path, monitor: Monitor, script: Path) -> dict[str, Any]:
    detected_at = time.time()
    snap = monitor.snapshot(detected_at)
    pids = monitor.live_pids()
    stacks = {r: rundir.rank_dir(run_dir, r) / rundir.STACKS for r in monitor.ranks}
    before = {r: (p.stat().st_size if p.exists() else 0) for r, p in stacks.items()}
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    deadline = time.time() + STACK_WAIT_S
    while time.time() < deadline:
        if all(_grown(stacks[r], before[r]) for r in pids):
            time.sleep(0.2)  # let the last thread's dump finish
            break
        time.sleep(0.1)

    script_dir = str(script.parent)
    ranks = []
    for r in sorted(monitor.ranks):
        prog = monitor.ranks[r]
        obs = observe_rank(run_dir, r, key=None)
        dump = _read_from(stacks[r], before[r])
        parsed = parse_stacks(dump) if dump else {"site": None, "frames": []}
        site = parsed["site"]
        pending = obs.pending_collective
        entry = {
            "rank": r,
            "pid": pids.get(r),
            "exited": prog.exited,
            "exit_status": prog.exit_status,
            "last_step": prog.steps,
            "blocked_at": site,
            "in_script": bool(site and site.startswith(script_dir)),
            "pending_collective": _collective(pending),
            "last_collective": _collective(obs.last_collective),
            "frames": parsed["frames"][:12],
        }
        ranks.append(entry)
    # Wall-clock times, so the report itself shows it came within the promised bound
    # (hang timeout + 10 s after the last progress).
    report = {
        "since_progress_s": round(snap.since_progress_s, 2),
        "hang_timeout_s": monitor.hang_timeout,
        "startup_timeout_s": monitor.startup_timeout,
        "phase": snap.phase,
        "attempt": monitor.attempt,
        "last_progress_at": round(monitor.last_progress, 3),
        "detected_at": round(detected_at, 3),
        "written_at": round(time.time(), 3),
        "ranks": ranks,
    }
    rundir.atomic_write_json(run_dir / "hang.json", report)
    rundir.atomic_write_text(run_dir / "hang.txt", format_hang(report))
    return report


def _grown(path: Path, size: int) -> bool:
    return path.exists() and path.stat().st_size > size


def _read_from(path: Path, offset: int) -> str:
    if not path.exists():
        return ""
    with open(path, errors="replace") as f:
        f.seek(offset)
        return f.read()


def _collective(rec: dict[str, Any] | None) -> dict[str, Any] | None:
    if not rec:
        return None
    return {k: rec.get(k) for k in ("op", "seq", "site", "shapes", "dtype", "step")}


def format_hang(report: dict[str, Any]) -> str:
    if report.get("phase") == "startup":
        head = (f"No optimizer step yet, and no rank made progress for {report['since_progress_s']:.1f} s "
                f"(start-up allowance {report.get('startup_timeout_s', 0):.0f} s")
    else:
        head = (f"No rank made progress for {report['since_progress_s']:.1f} s "
                f"(hang timeout {report['hang_timeout_s']:.0f} s")
    lines = [f"{head}, attempt {report['attempt']})."]
    if not report["ranks"]:
        lines.append("No rank has started: the launcher is still in rendezvous or start-up (see launcher.log).")
    for r in report["ranks"]:
        if r["exited"]:
            how = {"killed": "died without an exit record (killed)", None: "exited"}.get(
                r.get("exit_status"), f"exited ({r.get('exit_status')})")
            lines.append(f"rank {r['rank']}: {how} after step {r['last_step']}")
            continue
        where = r["blocked_at"] or "unknown (no stack dump)"
        lines.append(f"rank {r['rank']}: last completed step {r['last_step']}; blocked at {where}")
        pc = r["pending_collective"]
        if pc:
            lines.append(f"    inside {pc['op']} #{pc['seq']} called at {pc['site']}")
        elif r["last_collective"]:
            lc = r["last_collective"]
            lines.append(f"    last collective: {lc['op']} #{lc['seq']} at {lc['site']}")
    return "\n".join(lines) + "\n"
