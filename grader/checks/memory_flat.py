"""memory_flat: memory stays flat, judged from more than one signal, so that offsetting one of them
(a pre-allocated balloon released as a leak grows keeps the RSS slope flat) does not hide a leak:

- the slope of memory per step after warm-up (CUDA allocated where present, else RSS: in a
  sandboxed run the RSS of the rank's processes sampled by the parent from outside and aligned to
  the steps by the parent's receive times, ``grader.evidence.memory``; a script that patches what
  the rank reports of itself changes nothing);
- the level: the median after warm-up against the reference run's (a balloon that offsets a
  leak must start high);
- where the step records carry them, the counts of live tensors and autograd graph nodes the rank
  holds (a kept graph grows them whatever the process's RSS does)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need
from grader.evidence.memory import rank_series

MIN_POINTS = 20  # fewer steps than this after warm-up cannot tell a leak from noise


def slope(ys: list[float]) -> float:
    """Least-squares slope per step."""
    n = len(ys)
    mx = (n - 1) / 2
    my = sum(ys) / n
    num = sum((i - mx) * (y - my) for i, y in enumerate(ys))
    den = sum((i - mx) ** 2 for i in range(n))
    return num / den if den else 0.0


COUNTS = {"live_tensors": "live tensors", "graph_nodes": "autograd graph nodes"}


class Spec(CheckSpec):
    name: Literal["memory_flat"]
    warmup_steps: int = Field(10, ge=0)
    max_slope_mb_per_step: float = Field(0.05, gt=0)
    # the median after warm-up may be at most this many times the reference run's, plus the slack
    max_level_over_reference: float | None = Field(None, gt=1.0)
    level_slack_mb: float = Field(64.0, ge=0)
    # counts recorded per step (live tensors, graph nodes) may grow at most this much per step
    max_count_slope: float = Field(0.2, gt=0)


def _counts(ev, rank: int, field: str, warmup: int) -> list[float]:
    last = max((int(e.get("attempt", 0)) for e in ev.events(rank) if e.get("kind") == "step"), default=0)
    ys = [float(e[field]) for e in ev.events(rank)
          if e.get("kind") == "step" and int(e.get("attempt", 0)) == last and field in e]
    return ys[warmup:]


def _median(xs: list[float]) -> float:
    ys = sorted(xs)
    return ys[len(ys) // 2] if ys else 0.0


def _level(ev, warmup: int) -> tuple[float, str]:
    """The highest per-rank median after warm-up, and what it measures."""
    best, what = 0.0, "RSS"
    for r in ev.ranks:
        series = rank_series(ev, r)
        m = _median(series.values[warmup:])
        if m >= best:
            best, what = m, series.what
    return best, what


def judge(spec: Spec, ctx: Context) -> CheckResult:
    ev = need(ctx, "memory_flat", "main", ok_only=False)
    if isinstance(ev, CheckResult):
        return ev
    per_rank, worst = {}, None
    for r in sorted(ev.ranks):
        series = rank_series(ev, r)
        if len(series.values) < spec.warmup_steps + MIN_POINTS:
            return CheckResult("memory_flat", False,
                               f"rank {r} made {len(series.values)} steps; at least {spec.warmup_steps + MIN_POINTS} "
                               "are needed to measure memory growth", {"steps": len(series.values)})
        ys = series.after(spec.warmup_steps, MIN_POINTS)
        s = slope(ys)
        per_rank[r] = {"slope_mb_per_step": round(s, 5), "start_mb": round(ys[0], 1),
                       "end_mb": round(ys[-1], 1), "steps": len(ys), "measure": series.what,
                       "outside": series.outside}
        if worst is None or s > per_rank[worst]["slope_mb_per_step"]:
            worst = r
    w = per_rank[worst]
    evidence = {"threshold_mb_per_step": spec.max_slope_mb_per_step, "ranks": per_rank}
    detail = (f"rank {worst}'s {w['measure']} changed {w['slope_mb_per_step']:+.3f} MB per step over "
              f"{w['steps']} steps after warm-up ({w['start_mb']:.0f} → {w['end_mb']:.0f} MB); "
              f"threshold {spec.max_slope_mb_per_step} MB per step")
    if w["slope_mb_per_step"] > spec.max_slope_mb_per_step:
        return CheckResult("memory_flat", False, detail, evidence)
    for field, label in COUNTS.items():
        for r in sorted(ev.ranks):
            ys = _counts(ev, r, field, spec.warmup_steps)
            if len(ys) < MIN_POINTS:
                continue
            k = slope(ys)
            evidence.setdefault(field, {})[r] = {"slope_per_step": round(k, 4), "start": ys[0], "end": ys[-1]}
            if k > spec.max_count_slope:
                return CheckResult("memory_flat", False, f"the {label} rank {r} holds grew by {k:.2f} per step over "
                                   f"{len(ys)} steps after warm-up ({ys[0]:.0f} → {ys[-1]:.0f}), while its memory "
                                   f"slope read {w['slope_mb_per_step']:+.3f} MB per step", evidence)
    if spec.max_level_over_reference:
        ref = need(ctx, "memory_flat", "reference")
        if isinstance(ref, CheckResult):
            return ref
        mine, what = _level(ev, spec.warmup_steps)
        theirs, _ = _level(ref, spec.warmup_steps)
        allowed = theirs * spec.max_level_over_reference + spec.level_slack_mb
        evidence.update(level_mb=round(mine, 1), level_over_reference=round(mine / theirs, 2) if theirs else None,
                        max_level_over_reference=spec.max_level_over_reference, level_slack_mb=spec.level_slack_mb)
        if mine > allowed:
            return CheckResult("memory_flat", False, f"{what} held at a median of {mine:.0f} MB after warm-up, "
                               f"{mine / theirs:.1f}x the reference run's level (at most "
                               f"{spec.max_level_over_reference:g}x plus {spec.level_slack_mb:g} MB): memory is flat "
                               "but far higher than the work needs", evidence)
    return CheckResult("memory_flat", True, detail, evidence)


CHECK = Check("memory_flat", Spec, judge, needs_reference=lambda spec: bool(spec.max_level_over_reference))
