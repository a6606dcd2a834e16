"""The hang report: when the job is ended for a stall, ask every rank where it is.

Each rank's bootstrap registered faulthandler on SIGUSR1, writing all threads' stacks to its own
``stacks.txt``. We note each file's size, signal the ranks, wait for the dumps, and combine them
with the collectives each rank issued and never saw complete (from its trace), with what its main
thread was doing (/proc) and with when the parent last saw it use CPU, into ``hang.json`` and
``hang.txt``: what kind of stall it was (``harness.stall``: a deadlock, a straggler, no progress
at all), which ranks waited in which collective, and which rank was outside one doing what.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from harness import rundir
from harness.monitor import Monitor, RankProgress
from harness.observe import observe_rank, parse_stacks
from harness.stall import EXITED, IN_COLLECTIVE, OUTSIDE, RankFacts, classify, summary

STACK_WAIT_S = 4.0


def collect_hang(run_dir: Path, monitor: Monitor, script: Path, ended_by: str = "hang timeout") -> dict[str, Any]:
    """Ask every live rank for its stacks and write the report. ``ended_by``: the limit that ended
    the job ("hang timeout", "start-up allowance", "stall limit", "time limit"). The trace is read
    unverified here: the grader re-reads everything verified afterwards."""
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
    ranks, facts = [], []
    for r in sorted(monitor.ranks):
        prog = monitor.ranks[r]
        obs = observe_rank(run_dir, r, key=None)
        dump = _read_from(stacks[r], before[r])
        parsed = parse_stacks(dump) if dump else {"site": None, "frames": []}
        site = parsed["site"]
        pending = obs.pending_collective
        fact = RankFacts(rank=r, exited=prog.exited or prog.attempt != monitor.attempt, exit_status=prog.exit_status,
                         open=[c for c in obs.pending_collectives], site=site, last_step=prog.steps,
                         quiet_s=_quiet(prog, detected_at))
        if not fact.exited and pids.get(r) is not None:
            fact.thread = monitor.stallwatch.threads(pids[r])
        facts.append(fact)
        thread = fact.thread.to_json() if fact.thread is not None else None
        entry = {
            "rank": r,
            "pid": pids.get(r),
            "exited": prog.exited,
            "exit_status": prog.exit_status,
            "last_step": prog.steps,
            "blocked_at": site,
            "in_script": bool(site and site.startswith(script_dir)),
            "state": _state(prog.exited, pending),
            "thread": thread,
            "doing": thread["doing"] if thread else None,
            "pending_collective": _collective(pending, detected_at),
            "pending_collectives": [_collective(c, detected_at) for c in obs.pending_collectives[-8:]],
            "last_collective": _collective(obs.last_collective),
            # Seconds before detection: the parent's own observations of this rank.
            "busy_s_ago": _ago(prog.busy_until, detected_at),
            "last_record_s_ago": _ago(prog.last_record_at, detected_at),
            "cpu_fraction": None if prog.cpu_fraction is None else round(prog.cpu_fraction, 4),
            "frames": parsed["frames"][:12],
        }
        ranks.append(entry)
    stall = classify(facts, monitor.world_size or len(facts))
    states = {v.rank: v.state for v in stall.ranks}
    for entry in ranks:
        entry["state"] = states[entry["rank"]]
    # Wall-clock times, so the report itself shows it came within the promised bound
    # (hang timeout + 10 s after the last progress).
    report = {
        "kind": stall.kind,
        "ended_by": ended_by,
        "whole_world": stall.whole_world,
        "stall": summary(stall),
        "since_progress_s": round(snap.since_progress_s, 2),
        "hang_timeout_s": monitor.hang_timeout,
        "startup_timeout_s": monitor.startup_timeout,
        "stall_limit_s": monitor.stall_limit(),
        "phase": snap.phase,
        "attempt": monitor.attempt,
        "last_progress_at": round(monitor.last_progress, 3),
        "detected_at": round(detected_at, 3),
        "written_at": round(time.time(), 3),
        "last_progress_by": monitor.progress_by,
        "busy_fraction": monitor.liveness.busy_fraction,
        "ranks": ranks,
        "story": story(ranks),
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


def _collective(rec: dict[str, Any] | None, now: float | None = None) -> dict[str, Any] | None:
    if not rec:
        return None
    out = {k: rec.get(k) for k in ("op", "seq", "site", "api", "by", "shapes", "dtype", "step")}
    if now is not None and isinstance(rec.get("t"), (int, float)):
        out["waiting_s"] = round(max(now - rec["t"], 0.0), 2)
    if rec.get("error"):
        out["error"] = rec["error"]
    return out


def _ago(t: float | None, now: float) -> float | None:
    return None if t is None else round(max(now - t, 0.0), 2)


def _quiet(prog: RankProgress, now: float) -> float | None:
    heard = max((t for t in (prog.last_record_at, prog.busy_until) if t is not None), default=None)
    return None if heard is None else now - heard


def _state(exited: bool, pending: dict[str, Any] | None) -> str:
    """Before classification: from the trace alone."""
    if exited:
        return EXITED
    return IN_COLLECTIVE if pending and not pending.get("error") else OUTSIDE


def story(ranks: list[dict[str, Any]]) -> list[str]:
    """Which ranks waited in which collective while which rank was still working: a rank counts
    as working after another began to wait when its CPU was busy later than that wait began."""
    out = []
    waiting = sorted((r for r in ranks if r["state"] == IN_COLLECTIVE and r.get("pending_collective")
                      and r["pending_collective"].get("waiting_s") is not None),
                     key=lambda r: -r["pending_collective"]["waiting_s"])
    for w in waiting:
        pc = w["pending_collective"]
        workers = [r for r in ranks if r["rank"] != w["rank"] and r.get("busy_s_ago") is not None
                   and r["busy_s_ago"] + 1.0 < pc["waiting_s"]]
        if not workers:
            continue
        who = ", ".join(f"rank {r['rank']} (busy until {r['busy_s_ago']:.1f} s before detection)"
                        for r in workers)
        out.append(f"rank {w['rank']} was waiting in {pc['op']} #{pc['seq']} from {pc['waiting_s']:.1f} s "
                   f"before detection while {who} was still working")
    return out


LIMITS = {"hang timeout": "hang_timeout_s", "start-up allowance": "startup_timeout_s",
          "stall limit": "stall_limit_s"}


def format_hang(report: dict[str, Any]) -> str:
    ended_by = report.get("ended_by") or ("start-up allowance" if report.get("phase") == "startup" else "hang timeout")
    since = f"{report['since_progress_s']:.1f} s"
    if ended_by == "time limit":
        head = f"The run's time limit ran out while no rank had made progress for {since} (attempt {report['attempt']})."
    else:
        limit = f"{ended_by} {report.get(LIMITS[ended_by], 0):.0f} s"
        head = (f"No optimizer step yet, and no rank made progress for {since} ({limit}, attempt {report['attempt']})."
                if report.get("phase") == "startup" else
                f"No rank made progress for {since} ({limit}, attempt {report['attempt']}).")
    lines = [head]
    stall = report.get("stall") or []
    if stall:
        lines.append(stall[0][:1].upper() + stall[0][1:] + ".")
        if report.get("kind") != "deadlock":
            lines.append("Not a hang: no collective was shown unable to complete; the job was ended at the "
                         + ("run's time limit." if ended_by == "time limit" else "stall limit."))
    if "busy_fraction" in report:
        lines.append(f"Progress is a new record from any rank, or a rank using at least "
                     f"{report['busy_fraction']:.0%} of a core (read from /proc); last progress: "
                     f"{report.get('last_progress_by', 'start')}.")
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
        outside = r.get("state") == OUTSIDE
        if outside:
            lines.append("    outside any collective" + (f": {r['doing']}" if r.get("doing") else ""))
        if pc:
            since = f" for {pc['waiting_s']:.1f} s" if pc.get("waiting_s") is not None else ""
            verb = "issued and not waited on" if outside else "waiting in"
            lines.append(f"    {verb} {pc['op']} #{pc['seq']} called at {pc['site']}{since}")
            others = [c for c in r.get("pending_collectives", []) if c["seq"] != pc["seq"]]
            if others:
                lines.append("    also issued and not completed: " + ", ".join(
                    f"{c['op']} #{c['seq']} at {c['site']}" for c in others[-3:]))
        elif r["last_collective"]:
            lc = r["last_collective"]
            lines.append(f"    last collective: {lc['op']} #{lc['seq']} at {lc['site']}")
        if "busy_s_ago" in r:
            lines.append("    last seen using CPU " + (f"{r['busy_s_ago']:.1f} s before detection"
                                                      if r["busy_s_ago"] is not None else "never"))
    lines += report.get("story", [])
    return "\n".join(lines) + "\n"
