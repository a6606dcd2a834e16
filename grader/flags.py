"""Flags for a human: what a submission touched that a fix has no reason to, gathered for the
interviewer to read (as KernelBench and METR review suspicious scores). A flag never changes a
verdict by itself; the checks and the sandbox stand on their own.

Sources, each a ``Flag.kind``:

- ``source``: the static scan of the submission's editable files (``grader.scan``);
- ``tampering``: what the parent's channel and the sampler saw in a sandboxed run of the candidate's
  code (``sandbox.json`` ``tampering``: connections from processes that are no rank, lines that are
  no record, records for another attempt, floods past a cap, truncated logs, refused files, two
  processes claiming one rank; step records received long after records of later steps, held back in
  the rank: ``grader.crosscheck.held_records``);
- ``stray``: processes that left the launcher's tree (a double-forked daemon) and were ended;
- ``trap``: FIFOs, sockets, devices and symlinks out of the work dir, removed before anything read it;
- ``limit``: a limit the run went past (memory, processes, disk, files);
- ``sealed``: a run dir or cached reference that changed after it was sealed;
- ``fault``: a planned kill the parent had to perform because the rank went past its point without
  marking it (``run.json`` ``faults_injected``, ``how = "overdue"``: the fault hook was bypassed), or
  one that hit a process other than the rank's own (a decoy that sent a start record and the fault's);
- ``behaviour``: what the script did at run time that a fix has no reason to (``harness.audit``: the
  kit's files opened, another process's ``/proc`` read, files written outside the working directory,
  ``ctypes`` libraries, programs started), however its text spelled it; and from the save trace,
  ``torch.save`` to a path outside the working directory (torch's own file writer, unseen by the hook);
- ``disagree``: what a rank reported about itself that the parent's own observation contradicts
  (``grader.crosscheck``: its memory against the parent's samples from ``/proc``, steps claimed on
  less CPU than a step costs, and a traced file changed after the last write the trace saw into it).

Only runs of the candidate's code are read (the main run, the other world sizes, the resumed runs,
the candidate's throughput rounds): the reference, the broken baseline and the compute bound are
the kit's.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from grader import crosscheck
from grader.result import Flag
from grader.scan import scan_files
from grader.text import printable
from harness import rundir
from harness.isolation import SANDBOX_FILE

MAX_PER_RUN = 20  # lines of one kind from one run; the rest are counted
SANDBOX_JSON_CAP = 4 * 2**20


def source_flags(root: Path, editable: list[str]) -> list[Flag]:
    return [Flag(kind="source", what=f.what, where=f.where) for f in scan_files(root, editable)]


def _read_summary(run_dir: Path) -> dict[str, Any] | None:
    path = Path(run_dir) / SANDBOX_FILE
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > SANDBOX_JSON_CAP:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_flags(run: str, run_dir: Path) -> list[Flag]:
    """The flags one run of the candidate's code left in its ``run.json`` (kills it evaded) and,
    sandboxed, its ``sandbox.json``."""
    out: list[Flag] = (_fault_flags(run, run_dir) + _claim_flags(run, run_dir) + _audit_flags(run, run_dir)
                       + _save_flags(run, run_dir))
    box = _read_summary(run_dir)
    if not box or not box.get("isolated"):
        return out
    try:
        key = rundir.load_run(run_dir)["key"]
        out += crosscheck.disagreements(run, run_dir, key)
        out += crosscheck.untraced_writes(run, run_dir, key)
        out += crosscheck.traffic_disagreement(run, run_dir, key)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no run.json to verify records with: nothing to hold against the samples
    try:
        out += crosscheck.held_records(run, run_dir)
    except Exception:  # a run dir the evidence cannot be read from: the checks say why
        pass
    for line in box.get("tampering") or []:
        out.append(Flag(kind="tampering", run=run, what=printable(str(line))[:300]))
    strays = box.get("strays") or []
    if strays:
        shown = "; ".join(repr(printable(str(s.get("cmdline", "")))[:80]) for s in strays[:3])
        out.append(Flag(kind="stray", run=run, what=f"{len(strays)} process(es) left the launcher's tree (a "
                        f"daemon?) and were ended: {shown}" + (" ..." if len(strays) > 3 else "")))
    removed = box.get("removed") or []
    if removed:
        shown = ", ".join(f"{printable(str(r.get('path')))[:80]} ({r.get('kind')})" for r in removed[:5])
        out.append(Flag(kind="trap", run=run, what=f"{len(removed)} thing(s) a reader could trip on were removed "
                        f"from the work dir: {shown}" + (" ..." if len(removed) > 5 else "")))
    for v in box.get("violations") or []:
        out.append(Flag(kind="limit", run=run, what=printable(str(v.get("message", v)))[:300]))
    return out[: MAX_PER_RUN * 4]


AUDIT_WHAT = {"kit": "opened the kit's file", "proc": "read", "outside": "wrote outside the working directory:",
              "ctypes": "used ctypes:", "spawn": "started a program:", "exec": "ran code made at run time:"}


def _audit_flags(run: str, run_dir: Path) -> list[Flag]:
    """The ``audit`` events of every rank (``harness.audit``), each (what, detail) once."""
    try:
        key = rundir.load_run(run_dir)["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    out: list[Flag] = []
    seen: set[tuple[str, str]] = set()
    for r in rundir.ranks_in(run_dir):
        for rec in rundir.read_records(rundir.rank_dir(run_dir, r) / rundir.EVENTS, key).valid:
            if rec.get("kind") != "audit":
                continue
            what, detail = str(rec.get("what")), printable(str(rec.get("detail")))[:200]
            if (what, detail) in seen or len(out) >= MAX_PER_RUN:
                continue
            seen.add((what, detail))
            out.append(Flag(kind="behaviour", run=run, what=f"rank {r} {AUDIT_WHAT.get(what, what)} {detail}",
                            where=printable(str(rec.get("where")))[:120]))
    return out


SAVE_TEMP = ("/tmp/", "/dev/shm/")


def _save_flags(run: str, run_dir: Path) -> list[Flag]:
    """``torch.save`` of the script to a path outside its working directory and the temporary
    folders, from the save trace (``harness.saves``): torch writes a path with its own C++ file
    writer, which no ``open`` audit event sees (``harness.audit``), so the trace is where such a
    write shows. Each path once."""
    try:
        key = rundir.load_run(run_dir)["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    work = os.path.realpath(Path(run_dir) / "work") + os.sep
    runs = os.path.realpath(Path(run_dir).parent) + os.sep  # the grading's run dirs: no temporary folder
    out: list[Flag] = []
    seen: set[str] = set()
    for r in rundir.ranks_in(run_dir):
        for rec in rundir.read_records(rundir.rank_dir(run_dir, r) / rundir.SAVES, key).valid:
            path = rec.get("path")
            if rec.get("op") != "save" or rec.get("ph") != "begin" or not isinstance(path, str) \
                    or not path.startswith("/"):
                continue
            real = os.path.normpath(path)
            if (real + os.sep).startswith(work) or real in seen or (
                    real.startswith(SAVE_TEMP) and not real.startswith(runs)):
                continue
            seen.add(real)
            if len(out) < MAX_PER_RUN:
                out.append(Flag(kind="behaviour", run=run, what=f"rank {r} called torch.save outside the working "
                                f"directory: {printable(real)[:200]} (the save trace)",
                                where=f"step {rec.get('step')}"))
    return out


def _fault_flags(run: str, run_dir: Path) -> list[Flag]:
    try:
        kills = json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8")).get("faults_injected") or []
    except (OSError, ValueError, AttributeError):
        return []
    return [Flag(kind="fault", run=run, what=f"rank {k.get('rank')} went past step {k.get('planned_step')}, where "
                 f"its planned kill was, without reaching the point the harness marks: " + (
                     f"the parent killed it from outside at step {k.get('seen_step')}" if k.get("killed", 1) else
                     f"it ran on to step {k.get('seen_step')} and ended before the parent could kill it") +
                 " (the fault hook was bypassed)")
            for k in kills if isinstance(k, dict) and k.get("how") == "overdue"]


def _claims(run_dir: Path) -> dict[tuple[int, int], list[int]]:
    """Per (rank, attempt), the pids of the processes that sent its ``boot`` and ``start`` records, in
    order (the channel stamps the sender's real pid; the first is the bootstrap's ``boot``, sent before
    the script runs)."""
    try:
        key = rundir.load_run(run_dir)["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    out: dict[tuple[int, int], list[int]] = {}
    for r in rundir.ranks_in(run_dir):
        for rec in rundir.read_records(rundir.rank_dir(run_dir, r) / rundir.EVENTS, key).valid:
            a, pid = rec.get("attempt"), rec.get("sender_pid", rec.get("pid"))
            if rec.get("kind") in ("boot", "start") and type(a) is int and type(pid) is int:
                pids = out.setdefault((r, a), [])
                if pid not in pids:
                    pids.append(pid)
    return out


def _claim_flags(run: str, run_dir: Path) -> list[Flag]:
    """A rank started by more than one process (a child of the script sending a ``start`` record, which
    the parent's monitor takes for the rank's pid: ``tampering``), and a planned kill that hit a process
    other than the rank's own, the one whose ``boot`` the bootstrap sent (``fault``: a decoy took it)."""
    claims = _claims(run_dir)
    out = [Flag(kind="tampering", run=run, what=f"rank {r}{f' (attempt {a})' if a else ''} was started by "
                f"{len(pids)} processes (pids {', '.join(map(str, pids[:4]))}): a process other than the rank's own "
                "sent a boot or start record, claiming to be it")
           for (r, a), pids in sorted(claims.items()) if len(pids) > 1]
    try:
        kills = json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8")).get("faults_injected") or []
    except (OSError, ValueError, AttributeError):
        kills = []
    out += _marks_run_past(run, run_dir, kills)
    for k in kills:
        if not isinstance(k, dict) or not k.get("killed"):
            continue
        rank, attempt = k.get("rank"), k.get("attempt")
        pids = claims.get((rank, attempt)) if isinstance(rank, int) and isinstance(attempt, int) else None
        own = pids[0] if pids else None
        if own is not None and k.get("pid") != own:
            out.append(Flag(kind="fault", run=run, what=f"the parent's planned kill of rank {k.get('rank')} (step "
                            f"{k.get('planned_step')}, {k.get('how')}) hit pid {k.get('pid')}, not the rank's own process "
                            f"(pid {own}, whose boot record the bootstrap sent): a decoy took the kill, and the rank was "
                            "not killed there"))
    return out


def _marks_run_past(run: str, run_dir: Path, kills: list[Any]) -> list[Flag]:
    """A step fault's mark (``fault`` with ``what = "sigkill"``) followed by a step record of a later
    step in the same attempt: the harness's hook waits at its mark until the parent kills the rank, so
    the rank went on past a mark it did not wait at, or another process sent it (a decoy), and the
    parent, finding the point marked, looked no further (``harness.injector.FaultInjector.settle``)."""
    try:
        key = rundir.load_run(run_dir)["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    out = []
    for r in rundir.ranks_in(run_dir):
        marks: dict[int, int] = {}
        last: dict[int, int] = {}
        for rec in rundir.read_records(rundir.rank_dir(run_dir, r) / rundir.EVENTS, key).valid:
            a, step = rec.get("attempt"), rec.get("step")
            if type(a) is not int or type(step) is not int:
                continue
            if rec.get("kind") == "fault" and rec.get("what") == "sigkill":
                marks.setdefault(a, step)
            elif rec.get("kind") == "step" and a in marks and step > marks[a]:
                last[a] = max(last.get(a, 0), step)
        for a, after in sorted(last.items()):
            killed = [k for k in kills if isinstance(k, dict) and k.get("rank") == r and k.get("attempt") == a
                      and k.get("killed")]
            out.append(Flag(kind="fault", run=run, what=f"rank {r}{f' (attempt {a})' if a else ''} marked its planned "
                            f"kill at step {marks[a]}, where the harness's hook waits to be killed, yet went on to step "
                            f"{after}: " + ("the parent's kill hit another process" if killed else
                                            "no kill was performed") + " (a decoy sent the mark, or the hook was bypassed)"))
    return out


def candidate_run_dirs(run_dirs: dict[str, str], out_dir: Path) -> dict[str, Path]:
    """The runs of the candidate's code: every run of the plan but the reference, and the
    candidate's throughput rounds (``runs/tp-<round>-candidate``: the link to the round's folder,
    which is named by a random token; the real folder is returned)."""
    found = {name: Path(d) for name, d in run_dirs.items() if name != "reference"}
    runs = Path(out_dir) / "runs"
    if runs.is_dir():
        for d in sorted(runs.glob("tp-*-candidate")):
            found.setdefault(d.name, d.resolve())
    return found


def gather(root: Path, editable: list[str], runs: dict[str, Path], notes: list[str] | None = None) -> list[Flag]:
    flags = source_flags(root, editable)
    for name, d in runs.items():
        flags += run_flags(name, d)
    flags += [Flag(kind="sealed", what=n) for n in notes or []]
    return flags
