"""What a rank said about itself against what the parent saw of it: a disagreement is a flag with
its evidence (``Flag.kind == "disagree"``), and the verdict already rests on the parent's side.

Memory: each step record carries the RSS the rank read of itself (``rss_mb``); the parent sampled
the same process from ``/proc`` at every poll (``proc.jsonl``, sandboxed runs) and stamped each
record with its receive time (``rt``). The rank's figure against the outside samples interpolated
at that time: a script that patches what it reports (psutil, ``/proc/self/statm`` read through a
wrapper) to hide a leak drifts from the samples by the leak itself. ``memory_flat`` judges a
sandboxed run from the outside samples already; the flag tells the interviewer the rank lied.

Measured (memory-leak's broken script and reference, sandboxed, 2 ranks, ~190 steps each, 2-core
machine under a concurrent grading): the honest median of |reported - sampled| 0.01 to 0.73 MB per
rank, its largest single step 8.7 MB (the broken script leaks ~2 MB a step, and the samples are
0.25 s apart). A disagreement is a median over the sampled steps above ``MIN_MB`` and ``MIN_REL``
of the level: 14x the largest honest median; a flat report hiding memory-leak's leak is ~200 MB
off in the median.

CPU: each sample carries the CPU time the rank's own process had used (``cpu_s``: user and system,
every thread, reaped children). A step of training costs CPU even where a GPU does the arithmetic
(the forward, backward and optimizer are dispatched from Python); a record costs tens of
microseconds. Steps the rank claimed between two samples on less than ``CPU_FLOOR_MS`` of CPU each
were claimed without the work: records held back and released in a burst, or step records made up.
Measured (300 graded runs drawn at random from the validity gradings of every exercise, 3462
intervals of 0.25 s holding at least 5 steps, 2-core machine): the cheapest honest interval cost
2.05 ms of the rank's CPU a step (sampler-replay, about 240 steps/s); the floor is a tenth of that.
Not measured on a GPU, where the CPU a step costs is launch overhead only; the flag is for the
interviewer and never changes a verdict. The tree's CPU (DataLoader workers) is not used: it falls
when a worker exits unreaped.

Files: the save trace says when each traced write into a path ended (its end record, stamped by
the parent on receipt: ``rt``); the work dir, read after the run (sealed: ``lstat`` only), says when
each file last changed. A traced file that changed later than its last traced write was written by
something the trace cannot see (``ctypes``, a program started, a memory map): the checks read the
file itself, so the verdict already rests on what it holds, and the flag says how it came to.

Traffic: the collective trace's bytes against the bytes the run's own loopback carried
(``grader.evidence.traffic``, with its margins); ``collectives_per_step`` also fails on it."""

from __future__ import annotations

import os
import stat
import statistics
from pathlib import Path
from typing import Any

from grader.checks._held import CPU_FLOOR_MS, MIN_CHEAP_STEPS, cheap_steps
from grader.evidence import traffic
from grader.evidence.memory import interpolate
from grader.evidence.saves import file_ops
from grader.result import Flag
from harness import rundir
from harness.isolation import PROC_SAMPLES

MIN_MB = 10.0
MIN_REL = 0.03
MIN_STEPS = 8  # sampled steps, at least, to judge a rank's reports
# A file's mtime later than the receipt of its last traced write's end: honest writes end before
# their record is sent, so their mtime precedes the receipt. Measured over 1206 traced files left by
# 400 stored gradings of every exercise (rewrites, mutations, partial fixes): at most 0.007 s later
# (two ranks racing on one file), 140x under this slack.
UNTRACED_SLACK_S = 1.0
MAX_UNTRACED = 5  # files named; a script that rewrites every checkpoint so needs no more to be seen


def disagreements(run: str, run_dir: Path, key: str) -> list[Flag]:
    out = []
    for r in rundir.ranks_in(run_dir):
        rdir = rundir.rank_dir(run_dir, r)
        steps = [e for e in rundir.read_records(rdir / rundir.EVENTS, key).valid if e.get("kind") == "step"]
        samples = rundir.read_records(rdir / PROC_SAMPLES, key).valid
        for attempt in sorted({_attempt(e) for e in steps}):
            mine = [e for e in steps if _attempt(e) == attempt]
            seen = [s for s in samples if s.get("a") == attempt]
            out += [f for f in (_memory(run, r, attempt, mine, seen), _cpu(run, r, attempt, mine, seen)) if f]
    return out


def _attempt(rec: dict[str, Any]) -> int:
    a = rec.get("attempt", rec.get("a", 0))
    return a if isinstance(a, int) else -1


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def memory_off(steps: list[dict[str, Any]], samples: list[dict[str, Any]]) -> tuple[float, int, float] | None:
    """What the rank reported of its memory against the parent's samples at the same moments:
    (the median of reported - sampled in MB, the steps compared, the sampled level), where they
    disagree beyond ``MIN_MB`` and ``MIN_REL``; None where they agree or too few steps fall among
    the samples to tell."""
    # only samples up to the attempt's last step record: a sample after it may be of the process being
    # torn down (a rank killed by the parent was sampled at 8 MB as it went, which the steps between
    # the last live sample and that one were interpolated toward: a rank that said nothing false
    # was flagged 16 MB off in the hostile suite's walk-objects)
    last = max((rt for e in steps if (rt := _num(e.get("rt"))) is not None), default=None)
    pts = sorted((t, y) for s in samples if (t := _num(s.get("t"))) is not None
                 and (y := _num(s.get("rss_mb"))) is not None and (last is None or t <= last))
    if len(pts) < 2:
        return None
    ts, ys = [t for t, _ in pts], [y for _, y in pts]
    diffs, levels = [], []
    for e in steps:
        said, at = _num(e.get("rss_mb")), _num(e.get("rt"))
        if said is None or at is None or not ts[0] < at <= ts[-1]:
            continue  # outside the sampled span: nothing of the parent's to hold it against
        seen = interpolate(ts, ys, at)
        diffs.append(said - seen)
        levels.append(seen)
    if len(diffs) < MIN_STEPS:
        return None
    off = statistics.median(abs(d) for d in diffs)
    level = statistics.median(levels)
    if off <= max(MIN_MB, MIN_REL * level):
        return None
    return statistics.median(diffs), len(diffs), level


def _memory(run: str, rank: int, attempt: int, steps: list[dict[str, Any]],
            samples: list[dict[str, Any]]) -> Flag | None:
    found = memory_off(steps, samples)
    if found is None:
        return None
    signed, n, level = found
    return Flag(kind="disagree", run=run,
                what=(f"rank {rank}{f' (attempt {attempt})' if attempt else ''} reported its memory "
                      f"{abs(signed):.0f} MB {'below' if signed < 0 else 'above'} what the parent sampled "
                      f"from /proc at the same steps (median over {n} steps; sampled level "
                      f"{level:.0f} MB): memory_flat does not rest on what the rank reported"))


def held_records(run: str, run_dir: Path) -> list[Flag]:
    """A ``tampering`` flag per rank whose step records the parent received long after records of
    later steps (``grader.checks._held``): held back in the rank and sent later, whatever time they
    carry. The step checks already refuse to time or place such steps."""
    from grader.checks._held import held_back
    from grader.evidence import load_run

    ev = load_run(run, run_dir)
    return [Flag(kind="tampering", run=run, what=f"{h.sentence()} (a held record can carry the time it is sent: "
                 "only the order of arrival shows it)")
            for r in sorted(ev.ranks) if (h := held_back(ev, r)) is not None]


def _cpu(run: str, rank: int, attempt: int, steps: list[dict[str, Any]],
         samples: list[dict[str, Any]]) -> Flag | None:
    pts = [(t, c) for s in samples if (t := _num(s.get("t"))) is not None and (c := _num(s.get("cpu_s"))) is not None]
    cheap, cpu, _ = cheap_steps([t for e in steps if (t := _num(e.get("rt"))) is not None], pts)
    if cheap < MIN_CHEAP_STEPS:
        return None
    return Flag(kind="disagree", run=run,
                what=(f"rank {rank}{f' (attempt {attempt})' if attempt else ''} claimed {cheap} steps on "
                      f"{cpu * 1000:.0f} ms of its CPU as the parent sampled it from /proc (under "
                      f"{CPU_FLOOR_MS:g} ms a step; an honest step costs 2 ms and more here): steps claimed "
                      "without the work, records held back or made up"))


def untraced_writes(run: str, run_dir: Path, key: str) -> list[Flag]:
    """Files in the work dir that changed after the last write the save trace saw into them."""
    records = {r: rundir.read_records(rundir.rank_dir(run_dir, r) / rundir.SAVES, key).valid
               for r in rundir.ranks_in(run_dir)}
    last: dict[str, float] = {}
    for op in file_ops(records):
        at = op.rt_end if op.rt_end is not None else op.t_end
        if op.path is not None and at is not None:
            last[op.path] = max(at, last.get(op.path, at))
    out = []
    for path, at in sorted(last.items()):
        try:
            st = os.lstat(path)
        except OSError:
            continue  # renamed away, or removed: nothing on disk to hold against the trace
        if not stat.S_ISREG(st.st_mode) or not _under_work(path, run_dir):
            continue
        late = st.st_mtime - at
        if late > UNTRACED_SLACK_S:
            out.append(Flag(kind="disagree", run=run, what=(
                f"{os.path.relpath(path, Path(run_dir) / 'work')} changed {late:.1f} s after the last write the "
                "save trace saw into it: written by something the trace does not see (ctypes, a program, a "
                "memory map); the checks read the file as it is")))
    return out[:MAX_UNTRACED]


def traffic_disagreement(run: str, run_dir: Path, key: str) -> list[Flag]:
    """The collective trace against the bytes the run's loopback carried (sandboxed runs on gloo). A
    world of one process has no peer to send to: its collectives move nothing, whatever they claim,
    so there is nothing to hold the trace against (a world-size-1 run of a script that all-reduces
    by hand claimed 7.9 MB against 0 sent, an honest run flagged)."""
    if int(rundir.load_run(run_dir).get("world_size", 0)) < 2:
        return []
    ranks = list(rundir.ranks_in(run_dir))  # read twice: a generator would leave the trace unread
    samples = [s for r in ranks for s in rundir.read_records(rundir.rank_dir(run_dir, r) / PROC_SAMPLES, key).valid]
    colls = [c for r in ranks for c in rundir.read_records(rundir.rank_dir(run_dir, r) / rundir.COLLECTIVES, key).valid]
    what = traffic.disagreement(traffic.measure(samples, colls))
    return [Flag(kind="disagree", run=run, what=what)] if what else []


def _under_work(path: str, run_dir: Path) -> bool:
    work = os.path.realpath(Path(run_dir) / "work") + os.sep
    return os.path.realpath(path).startswith(work)
