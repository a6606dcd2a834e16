"""The per-phase step breakdown of ``trainwreck run --profile``: the timer each rank runs, and the
reader that turns a rank's ``profile.jsonl`` back into per-phase figures.

Torch-free on purpose: the launcher (which never imports torch) and the grader read profiles with
it, and the timer's logic is tested without starting a rank. ``harness.profiler`` installs the
timer in a rank (the torch side: hooks, wrappers, ``torch.profiler``).

A step is the time from the end of one optimizer step (its post-hook) to the end of the next, so
gradient accumulation's micro-batches and a checkpoint saved between two steps land in the step
that follows. Phases are exclusive: a collective called inside backward counts as sync, not twice.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness import rundir
from harness.observe import WARMUP_STEPS

PROFILE_ENV = rundir.PROFILE_ENV  # set by the launcher under --profile: the schedule, as JSON
PROFILE = "profile.jsonl"  # per rank, signed: profile_start, phases (one per step), tail, trace
TIMED = ("data", "forward", "backward", "sync", "optimizer", "checkpoint")
PHASES = TIMED + ("other",)
# torch.profiler schedule, in optimizer steps: skip start-up, warm the profiler up, record a few.
SCHEDULE = {"wait": 4, "warmup": 1, "active": 3}

NOTES = (
    "sync is the time spent issuing collectives (whoever issues them: the script, FSDP2, DTensor, DDP) "
    "and waiting for them in Work.wait or a functional collective's wait; DDP waits for its bucketed "
    "gradient all-reduces in C++ at the end of the backward pass, so that wait is counted in backward.",
    "ms are means per counted step, and share is the phase's share of those steps' wall time "
    "(mean phase / mean step), so the shares add up to 100% with the profiler's own time.",
    "phases are measured on each rank's main thread; saves on other threads are listed separately "
    "as background checkpoints.",
)
CPU_NOTE = "CPU: phases are wall time of the main thread; no synchronisation added."
CUDA_SYNC_NOTE = ("CUDA: the profiler calls torch.cuda.synchronize() at every phase boundary, so phases are "
                  "device time, and steps are slower than without --profile (overlap across phases is lost).")


class PhaseTimer:
    """Exclusive time per phase on one thread, between step boundaries.

    ``enter``/``exit`` nest: entering a phase pauses the one it interrupts; re-entering the phase
    on top of the stack only deepens it (a module's submodules, ``Tensor.backward`` calling
    ``torch.autograd.backward``), so nothing is counted twice. An ``exit`` with phases still open
    above it (an exception skipped their exits) closes those too; one that matches nothing is ignored.
    Calls from any other thread than the one that made the timer are ignored.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 before_clock: Callable[[], None] | None = None):
        self._clock = clock
        self._before_clock = before_clock  # torch.cuda.synchronize under --profile on CUDA
        self.thread = threading.get_ident()
        self._stack: list[list[Any]] = []  # [phase, depth]
        self._mark = self._now()  # since when the phase on top (if any) is being charged
        self.window_start = self._mark
        self.acc = dict.fromkeys(TIMED, 0.0)

    def _now(self) -> float:
        if self._before_clock is not None:
            self._before_clock()
        return self._clock()

    def enter(self, phase: str) -> None:
        if threading.get_ident() != self.thread:
            return
        st = self._stack
        if st and st[-1][0] == phase:
            st[-1][1] += 1
            return
        now = self._now()
        if st:
            self.acc[st[-1][0]] += now - self._mark
        self._mark = now
        st.append([phase, 1])

    def exit(self, phase: str) -> None:
        if threading.get_ident() != self.thread:
            return
        st = self._stack
        i = len(st) - 1
        while i >= 0 and st[i][0] != phase:
            i -= 1
        if i < 0:
            return
        if i == len(st) - 1 and st[i][1] > 1:
            st[i][1] -= 1
            return
        now = self._now()
        self.acc[st[-1][0]] += now - self._mark
        self._mark = now
        if st[i][1] > 1:  # left by an exception above it, still open itself
            st[i][1] -= 1
            del st[i + 1:]
        else:
            del st[i:]

    def close_window(self, profiler_s: float = 0.0) -> dict[str, float]:
        """The phases since the last boundary, in seconds, with ``wall`` and ``other``; starts the
        next window. Phases still open carry on into it."""
        now = self._now()
        if self._stack:
            self.acc[self._stack[-1][0]] += now - self._mark
            self._mark = now
        wall = now - self.window_start
        out = {p: round(v, 7) for p, v in self.acc.items()}
        out["other"] = round(max(wall - sum(self.acc.values()) - profiler_s, 0.0), 7)
        out["profiler"] = round(profiler_s, 7)
        out["wall"] = round(wall, 7)
        self.acc = dict.fromkeys(TIMED, 0.0)
        self.window_start = now
        return out


# -- reading ---------------------------------------------------------------------------------


@dataclass
class PhaseStat:
    median_ms: float
    mean_ms: float
    share: float  # of the counted steps' total wall time: mean_ms / the mean step


@dataclass
class RankProfile:
    rank: int
    steps: int = 0  # step records in the last attempt
    counted: int = 0  # steps the figures are over
    counted_from: str = ""  # which steps those are, in words
    step_ms: float = 0.0  # median wall time of a counted step
    step_mean_ms: float = 0.0  # mean wall time of a counted step: what the phases' shares are of
    phases: dict[str, PhaseStat] = field(default_factory=dict)
    profiler_ms: float = 0.0  # median time the harness's profiler took per counted step
    after_last_step_ms: dict[str, float] = field(default_factory=dict)  # from the last step to exit
    background_checkpoint_ms: float = 0.0  # saves on other threads, whole run (not in the phases)
    cuda_sync: bool = False
    trace: str | None = None  # path of the Chrome trace, only when written and intact
    trace_steps: list[int] | None = None
    trace_error: str | None = None
    forged_lines: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(rank: int, records: list[dict[str, Any]], rank_dir: Path | None = None) -> RankProfile:
    """Per-phase figures from one rank's verified profile records (pure)."""
    out = RankProfile(rank=rank)
    attempts = [int(r.get("attempt", 0)) for r in records]
    last = max(attempts, default=0)
    recs = [r for r in records if int(r.get("attempt", 0)) == last]
    steps = [r for r in recs if r.get("kind") == "phases"]
    out.steps = len(steps)
    for r in recs:
        kind = r.get("kind")
        if kind == "profile_start":
            out.cuda_sync = bool(r.get("cuda_sync"))
        elif kind == "tail":
            out.after_last_step_ms = {p: round(float(r.get(p, 0.0)) * 1e3, 3) for p in PHASES}
        elif kind == "trace" and rank_dir is not None:
            path = rank_dir / str(r.get("file", ""))
            if path.is_file() and rundir.sha256_file(path) == r.get("sha256"):
                out.trace, out.trace_steps = str(path), r.get("steps")
            else:
                out.trace_error = f"{path.name} is missing or differs from what the rank wrote"
        elif kind == "trace_error":
            out.trace_error = str(r.get("error"))
    out.background_checkpoint_ms = round(1e3 * sum(
        float(r.get("bg_checkpoint", 0.0)) for r in recs if r.get("kind") in ("phases", "tail")), 3)

    # Start-up steps and the steps the torch profiler traced (it slows them down) are left out,
    # unless nothing would be left.
    chosen, how = [r for r in steps if r["step"] > WARMUP_STEPS and not r.get("traced")], \
        f"steps after the first {WARMUP_STEPS}, profiler-traced steps left out"
    if not chosen:
        chosen, how = [r for r in steps if not r.get("traced")], "all untraced steps (too few steps)"
    if not chosen:
        chosen, how = steps, "all steps, traced ones included (too few steps)"
    out.counted, out.counted_from = len(chosen), how if chosen else "no optimizer step"
    if not chosen:
        return out
    total_wall = sum(float(r.get("wall", 0.0)) for r in chosen) or 1.0
    out.step_ms = round(statistics.median(float(r.get("wall", 0.0)) for r in chosen) * 1e3, 3)
    out.step_mean_ms = round(statistics.fmean(float(r.get("wall", 0.0)) for r in chosen) * 1e3, 3)
    out.profiler_ms = round(statistics.median(float(r.get("profiler", 0.0)) for r in chosen) * 1e3, 3)
    for p in PHASES:
        vals = [float(r.get(p, 0.0)) for r in chosen]
        out.phases[p] = PhaseStat(median_ms=round(statistics.median(vals) * 1e3, 3),
                                  mean_ms=round(statistics.fmean(vals) * 1e3, 3),
                                  share=round(sum(vals) / total_wall, 4))
    return out


def read_rank(run_dir: Path | str, rank: int, key: str | None) -> RankProfile | None:
    """One rank's profile, from its signed records only; None when it wrote none."""
    rdir = rundir.rank_dir(run_dir, rank)
    path = rdir / PROFILE
    if not path.exists():
        return None
    recs = rundir.read_records(path, key)
    prof = summarize(rank, recs.valid, rdir)
    prof.forged_lines = recs.forged
    return prof


def read_run(run_dir: Path | str, key: str | None = None) -> dict[str, Any]:
    """Every rank's profile (JSON-ready), with the notes that say what the figures mean. The key
    comes from run.json when not given."""
    if key is None:
        key = rundir.load_run(run_dir).get("key")
    ranks = [p for p in (read_rank(run_dir, r, key) for r in rundir.ranks_in(run_dir)) if p is not None]
    cuda = any(p.cuda_sync for p in ranks)
    return {
        "phases": list(PHASES),
        "schedule": SCHEDULE,
        "ranks": [p.to_json() for p in ranks],
        "notes": [*NOTES, CUDA_SYNC_NOTE if cuda else CPU_NOTE],
    }
