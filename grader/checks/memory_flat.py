"""memory_flat: memory per step (CUDA allocated where present, else process RSS) stays flat."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need

MIN_POINTS = 20  # fewer steps than this after warm-up cannot tell a leak from noise


def slope(ys: list[float]) -> float:
    """Least-squares slope per step."""
    n = len(ys)
    mx = (n - 1) / 2
    my = sum(ys) / n
    num = sum((i - mx) * (y - my) for i, y in enumerate(ys))
    den = sum((i - mx) ** 2 for i in range(n))
    return num / den if den else 0.0


class Spec(CheckSpec):
    name: Literal["memory_flat"]
    warmup_steps: int = Field(10, ge=0)
    max_slope_mb_per_step: float = Field(0.05, gt=0)


def judge(spec: Spec, ctx: Context) -> CheckResult:
    ev = need(ctx, "memory_flat", "main", ok_only=False)
    if isinstance(ev, CheckResult):
        return ev
    per_rank, worst = {}, None
    for r, obs in sorted(ev.ranks.items()):
        series, what = (obs.cuda_alloc_mb, "allocated CUDA memory") if obs.cuda_alloc_mb else (obs.rss_mb, "RSS")
        ys = series[spec.warmup_steps:]
        if len(ys) < MIN_POINTS:
            return CheckResult("memory_flat", False,
                               f"rank {r} made {len(series)} steps; at least {spec.warmup_steps + MIN_POINTS} "
                               "are needed to measure memory growth", {"steps": len(series)})
        s = slope(ys)
        per_rank[r] = {"slope_mb_per_step": round(s, 5), "start_mb": round(ys[0], 1),
                       "end_mb": round(ys[-1], 1), "steps": len(ys), "measure": what}
        if worst is None or s > per_rank[worst]["slope_mb_per_step"]:
            worst = r
    w = per_rank[worst]
    evidence = {"threshold_mb_per_step": spec.max_slope_mb_per_step, "ranks": per_rank}
    detail = (f"rank {worst}'s {w['measure']} changed {w['slope_mb_per_step']:+.3f} MB per step over "
              f"{w['steps']} steps after warm-up ({w['start_mb']:.0f} → {w['end_mb']:.0f} MB); "
              f"threshold {spec.max_slope_mb_per_step} MB per step")
    return CheckResult("memory_flat", w["slope_mb_per_step"] <= spec.max_slope_mb_per_step, detail, evidence)


CHECK = Check("memory_flat", Spec, judge)
