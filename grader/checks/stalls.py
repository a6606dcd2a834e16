"""Checks for a training loop that stalls every k steps: the tail of the step times (from the signed
step records), and that taking the stall out of the loop still left a fresh, complete checkpoint on
disk at every step (from the save trace, with the step each file holds told by fingerprints).
"""

from __future__ import annotations

import bisect
import math
import statistics
from pathlib import Path
from typing import Any

from grader.checks.base import CheckResult, Context, need
from grader.checks.params import strip_wrappers, checkpoint_valid
from grader.evidence import RunEvidence
from grader.manifest import CheckpointValid
from harness.saves import FileOp

# Two fingerprints of the same parameters differ only by float64 rounding of a sum taken in
# another order; one optimizer update moves them by many orders of magnitude more.
FP_RTOL = 1e-9


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile: a value that occurred, never an interpolation between two."""
    s = sorted(xs)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def _median_after(ev: RunEvidence, warmup: int) -> float:
    meds = [statistics.median(o.step_times[warmup:]) for o in ev.ranks.values() if o.step_times[warmup:]]
    return statistics.median(meds) if meds else 0.0


def _steps_list(steps: list[tuple[int, float]], limit: int = 3) -> str:
    shown = ", ".join(str(s) for s, _ in steps[:limit])
    more = f" and {len(steps) - limit} more" if len(steps) > limit else ""
    lo, hi = min(t for _, t in steps), max(t for _, t in steps)
    took = f"{lo:.2f} s" if math.isclose(lo, hi, rel_tol=0.05) else f"{lo:.2f}-{hi:.2f} s"
    return f"step{'s' if len(steps) > 1 else ''} {shown}{more} took {took}"


def step_time_tail(spec, ctx: Context) -> CheckResult:
    name = "step_time_tail"
    ev = need(ctx, name, "main")
    if isinstance(ev, CheckResult):
        return ev
    bound = spec.max_p99_over_median
    evidence: dict[str, Any] = {"max_p99_over_median": bound, "warmup_steps": spec.warmup_steps, "ranks": {}}
    worst: tuple[float, int] | None = None
    slow_by_rank: dict[int, list[tuple[int, float]]] = {}
    for r in sorted(ev.ranks):
        times = ev.ranks[r].step_times[spec.warmup_steps:]
        if len(times) < spec.min_steps:
            evidence["ranks"][r] = {"steps": len(times)}
            return CheckResult(name, False, f"rank {r} made {len(times)} steps after the {spec.warmup_steps} "
                               f"warm-up steps; a p99 needs at least {spec.min_steps}", evidence)
        med, p99 = statistics.median(times), percentile(times, 99)
        ratio = p99 / med if med > 0 else math.inf
        # the step record's dt ends at this step: index i after warm-up is step warmup + i + 1
        slow = [(spec.warmup_steps + i + 1, t) for i, t in enumerate(times) if t > bound * med]
        slow_by_rank[r] = slow
        evidence["ranks"][r] = {"steps": len(times), "p50_s": round(med, 4), "p99_s": round(p99, 4),
                                "max_s": round(max(times), 4), "p99_over_median": round(ratio, 2),
                                "slow_steps": [s for s, _ in slow][:50]}
        if worst is None or ratio > worst[0]:
            worst = (ratio, r)
    ratio, r = worst
    info = evidence["ranks"][r]
    evidence["p99_over_median"] = info["p99_over_median"]
    if ratio > bound:
        slow = slow_by_rank[r]
        what = f": {_steps_list(slow)} against a median of {info['p50_s']:.3f} s" if slow else ""
        return CheckResult(name, False, f"rank {r}'s p99 step time is {ratio:.1f}x its median (p50 "
                           f"{info['p50_s']:.3f} s, p99 {info['p99_s']:.3f} s, max {info['max_s']:.3f} s; "
                           f"bound {bound:g}x){what}", evidence)
    if spec.max_median_over_reference:
        ref = need(ctx, name, "reference")
        if isinstance(ref, CheckResult):
            return ref
        mine, theirs = _median_after(ev, spec.warmup_steps), _median_after(ref, spec.warmup_steps)
        evidence.update(median_s=round(mine, 4), reference_median_s=round(theirs, 4))
        if theirs > 0 and mine / theirs > spec.max_median_over_reference:
            return CheckResult(name, False, f"the median step took {mine:.3f} s, {mine / theirs:.1f}x the "
                               f"reference run's {theirs:.3f} s (bound {spec.max_median_over_reference:g}x): "
                               "every step is slower, which also flattens the tail", evidence)
    return CheckResult(name, True, f"p99 step time at most {ratio:.2f}x the median on every rank (rank {r}: "
                       f"p50 {info['p50_s']:.3f} s, p99 {info['p99_s']:.3f} s; bound {bound:g}x)", evidence)


# -- checkpoint_fresh -----------------------------------------------------------------------------

def contents(ops: list[FileOp]) -> dict[str, list[tuple[float, FileOp | None]]]:
    """Per path, what it held over time: (time, the save whose bytes it holds) or (time, None) while
    a write into it runs, after a write into it failed or died, and after it was renamed away.
    (Deletions are not traced: a file removed by os.remove still counts as held.)"""
    events: list[tuple[float, int, str, FileOp]] = []
    for op in ops:
        if op.path is None:
            continue
        if op.op in ("save", "copy"):
            events.append((op.t_begin, op.seq, "begin", op))
        if op.t_end is not None:
            events.append((op.t_end, op.seq, "end", op))
    now: dict[str, FileOp | None] = {}
    out: dict[str, list[tuple[float, FileOp | None]]] = {}

    def put(path: str, t: float, held: FileOp | None) -> None:
        now[path] = held
        out.setdefault(path, []).append((t, held))

    for t, _, phase, op in sorted(events, key=lambda e: (e[0], e[1], e[2] == "end")):
        if phase == "begin":
            put(op.path, t, None)
        elif not op.completed:
            put(op.path, t, None)
        elif op.op == "save":
            put(op.path, t, op)
        elif op.op == "copy":
            put(op.path, t, now.get(op.src) if op.src else None)
        elif op.op == "rename" and op.src:
            held = now.get(op.src)
            if op.src in now:
                put(op.src, t, None)
            put(op.path, t, held)
    return out


def held_at(timeline: list[tuple[float, FileOp | None]], t: float) -> FileOp | None:
    i = bisect.bisect_right([x for x, _ in timeline], t)
    return timeline[i - 1][1] if i else None


def step_fingerprints(ev: RunEvidence, rank: int) -> dict[int, list[tuple[int, float]]]:
    """Per attempt, (step, parameter fingerprint) from the rank's signed events (step 0 before the
    first update)."""
    out: dict[int, list[tuple[int, float]]] = {}
    for r in ev.events(rank):
        if r.get("kind") == "fingerprint0" and "fp" in r:
            out.setdefault(int(r.get("attempt", 0)), []).append((0, float(r["fp"])))
        elif r.get("kind") == "step" and "fp" in r:
            out.setdefault(int(r.get("attempt", 0)), []).append((int(r["step"]), float(r["fp"])))
    return out


class _Holdings:
    """Which step the state in each traced save is, judged once per save."""

    def __init__(self, spec, ev: RunEvidence, final_names: set[str], min_bytes: int | None):
        self.spec, self.ev, self.final_names, self.min_bytes = spec, ev, final_names, min_bytes
        self._fps: dict[int, dict[int, list[tuple[int, float]]]] = {}
        self._memo: dict[tuple[int, int, int], tuple[int | None, str]] = {}

    def step(self, op: FileOp) -> tuple[int | None, str]:
        k = (op.rank, op.attempt, op.seq)
        if k not in self._memo:
            self._memo[k] = self._judge(op)
        return self._memo[k]

    def _judge(self, op: FileOp) -> tuple[int | None, str]:
        spec = self.spec
        if op.fp is None:
            return None, "its contents were not fingerprinted"
        if op.fp_changed:
            return None, "its tensors changed while it was being written (a live state, not a snapshot)"
        missing = [k for k in spec.require_keys if k not in (op.keys or [])]
        if missing:
            return None, f"it holds no {', '.join(missing)}"
        if self.min_bytes is not None and (op.bytes or 0) < self.min_bytes:
            return None, f"it is {(op.bytes or 0) / 2**20:.2f} MiB, less than {spec.min_size_of_reference:.0%} " \
                         "of the reference run's checkpoint"
        prefix = f"{spec.key}." if spec.key else ""
        model = {strip_wrappers(n[len(prefix):]): v for n, v in op.fp.items() if n.startswith(prefix)}
        lacking = sorted(self.final_names - set(model))
        if lacking:
            return None, f"it lacks parameters the model trains (e.g. {lacking[0]})"
        total = sum(model[n] for n in self.final_names)
        if op.rank not in self._fps:
            self._fps[op.rank] = step_fingerprints(self.ev, op.rank)
        for s, fp in sorted(self._fps[op.rank].get(op.attempt, []), reverse=True):
            if s <= op.step and abs(fp - total) <= FP_RTOL * max(1.0, abs(fp)):
                return s, ""
        return None, "its parameters are none the run had after any step"


def _targets(spec, work: Path, paths: list[str]) -> dict[str, tuple[list[str], int]]:
    """Per target, the traced paths it covers and the slack it is allowed."""
    out = {}
    copy_slack = spec.slack if spec.copy_slack is None else spec.copy_slack
    for t in [spec.path, *spec.copies]:
        full = str((work / t).resolve())
        if t.endswith("/"):
            covered = [p for p in paths if p.startswith(full + "/")]
        else:
            covered = [p for p in paths if p == full]
        out[t] = (covered, spec.slack if t == spec.path else copy_slack)
    return out


def _through_store(ev: RunEvidence, paths: list[str], mib_per_s: float,
                   info: dict[str, Any]) -> tuple[list[str], str]:
    """The paths the artifact store's signed upload records vouch for, and a problem when an upload
    took less time than the store's bandwidth needs for its bytes."""
    uploads: dict[str, list[tuple[int, float]]] = {}
    for r in ev.ranks:
        for e in ev.events(r):
            if e.get("kind") == "upload":
                uploads.setdefault(e.get("path"), []).append((int(e.get("bytes") or 0), float(e.get("dur") or 0)))
    fastest = max((((b / 2**20) / d if d > 0 else float("inf"), b, d)
                   for p in paths for b, d in uploads.get(p, []) if b), default=None)
    if fastest is not None and fastest[0] > 1.05 * mib_per_s:
        rate, b, d = fastest
        info["fastest_upload_mib_per_s"] = rate
        return paths, (f"an upload of {b / 2**20:.1f} MiB took {d:.3f} s ({rate:.0f} MiB/s); the artifact "
                       f"store's link carries {mib_per_s:g} MiB/s")
    kept = [p for p in paths if p in uploads]
    # hidden names are the store's own partial uploads, never what a reader of the store sees
    stray = [Path(p).name for p in paths if p not in uploads and not Path(p).name.startswith(".")]
    if stray:
        info["not_uploaded"] = stray[:5]
        info["files_not_uploaded"] = len(stray)
    return kept, ""


def checkpoint_fresh(spec, ctx: Context) -> CheckResult:
    name = "checkpoint_fresh"
    ev = need(ctx, name, "main")
    if isinstance(ev, CheckResult):
        return ev
    k = spec.interval
    evidence: dict[str, Any] = {"path": spec.path, "copies": spec.copies, "interval": k, "slack": spec.slack,
                                "copy_slack": spec.copy_slack}
    if not any(step_fingerprints(ev, r) for r in ev.ranks):
        return CheckResult(name, False, "the main run was not recorded with parameter fingerprints "
                           "(TRAINWRECK_FINGERPRINT=1), so which step a checkpoint holds cannot be told",
                           evidence, environment=True)
    final = ev.params(0)
    if final is None:
        return CheckResult(name, False, "rank 0 left no final parameters to tell checkpoints by", evidence)
    min_bytes = None
    ref = ctx.runs.get("reference")
    ref_ckpt = Path(ref.run_dir) / "work" / spec.path if ref is not None else None
    if spec.min_size_of_reference > 0 and ref_ckpt is not None and ref_ckpt.exists():
        min_bytes = int(spec.min_size_of_reference * ref_ckpt.stat().st_size)
        evidence["min_bytes"] = min_bytes
    holdings = _Holdings(spec, ev, {strip_wrappers(n) for n in final}, min_bytes)
    timelines = contents(ev.file_ops)
    work = (Path(ev.run_dir) / "work").resolve()
    # rank 0's step ends, last attempt: the moments a checkpoint must have existed
    last = max((int(r.get("attempt", 0)) for r in ev.events(0) if r.get("kind") == "step"), default=0)
    ends = [(int(r["step"]), float(r["t"])) for r in ev.events(0)
            if r.get("kind") == "step" and int(r.get("attempt", 0)) == last]
    evidence["targets"] = {}
    for target, (paths, slack) in _targets(spec, work, list(timelines)).items():
        info: dict[str, Any] = {"files": len(paths), "slack": slack}
        evidence["targets"][target] = info
        if target != spec.path and spec.store_mib_per_s:
            paths, problem = _through_store(ev, paths, spec.store_mib_per_s, info)
            if problem:
                return CheckResult(name, False, f"{target}: {problem}", evidence)
        seen: dict[int, int | None] = {}  # save seq -> step held, for the evidence
        rejected: list[str] = []
        late: list[tuple[int, int | None]] = []
        for s, t in ends:
            if s < k + slack:
                continue
            best = None
            for p in paths:
                op = held_at(timelines[p], t)
                if op is None:
                    continue
                held, why = holdings.step(op)
                seen[op.seq] = held
                if held is None:
                    rejected.append(f"{Path(p).name} (written at step {op.step}): {why}")
                elif best is None or held > best:
                    best = held
            if best is None or best < s - k - slack:
                late.append((s, best))
        info["checkpoint_steps"] = sorted({h for h in seen.values() if h is not None})[:40]
        if late:
            s, best = late[0]
            info.update(late_steps=len(late), first_late_step=s)
            if best is None:
                why = f"; {rejected[0]}" if rejected else ""
                if info.get("files_not_uploaded"):
                    why += (f"; {info['files_not_uploaded']} file(s) there (e.g. {info['not_uploaded'][0]}) "
                            "did not come through the artifact store")
                msg = f"at step {s} there was no complete checkpoint at {target} holding a known state{why}"
            else:
                msg = (f"at step {s} the newest complete checkpoint at {target} held step {best}: "
                       f"{s - best} steps old, where {k} + {slack} are allowed")
            worst = max((s2 - (b if b is not None else 0)) for s2, b in late)
            return CheckResult(name, False, f"{msg} ({len(late)} of {len(ends)} steps too far behind; "
                               f"worst {worst} steps)", evidence)
    # At the end the checkpoint itself must load and be the final state (checkpoint_valid's rules).
    valid = checkpoint_valid(CheckpointValid(name="checkpoint_valid", path=spec.path, key=spec.key,
                                             require_keys=spec.require_keys), ctx)
    evidence["final"] = valid.evidence
    if not valid.passed:
        return CheckResult(name, False, valid.message, evidence, environment=valid.environment)
    steps = evidence["targets"][spec.path]["checkpoint_steps"]
    allowed = " and ".join(f"{t} held a complete checkpoint at most {k} + {i['slack']} steps old"
                           for t, i in evidence["targets"].items())
    return CheckResult(name, True, f"at every step from {k + spec.slack} on, {allowed} (states of steps "
                       f"{', '.join(map(str, steps[:6]))}{', ...' if len(steps) > 6 else ''}); at the end "
                       f"{spec.path} loads and holds the final parameters", evidence)
