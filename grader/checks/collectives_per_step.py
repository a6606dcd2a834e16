"""collectives_per_step: how many collectives the script issues from Python per optimizer step,
from the harness's trace. One all-reduce per parameter, or a sync on every accumulation
micro-step, multiplies the count; DDP's buckets run in C++ and count 0."""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need


class Spec(CheckSpec):
    """Python-level collectives per optimizer step (DDP's C++ bucket all-reduces are not traced, so
    a DDP script counts 0 here; a hand-written bucketed sync counts 1)."""

    name: Literal["collectives_per_step"]
    max_per_step: float = Field(gt=0)


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "collectives_per_step"
    ev = need(ctx, name, "main")
    if isinstance(ev, CheckResult):
        return ev
    per_rank, ops = {}, Counter()
    for r, obs in sorted(ev.ranks.items()):
        recs = [x for x in ev.collective_records(r) if x.get("ph") == "enter" and x.get("step", 0) >= 1]
        ops.update(x["op"] for x in recs)
        steps = max(obs.steps - 1, 1)  # collectives before the first step (set-up broadcasts) do not count
        per_rank[r] = round(len(recs) / steps, 2)
    worst = max(per_rank.values(), default=0.0)
    evidence = {"per_step": per_rank, "max_per_step": spec.max_per_step, "ops": dict(ops.most_common(5))}
    common = ", ".join(f"{op} x{n}" for op, n in ops.most_common(3)) or "none"
    msg = (f"{worst:g} Python-level collectives per optimizer step (most common: {common}); "
           f"at most {spec.max_per_step:g} allowed")
    return CheckResult(name, worst <= spec.max_per_step, msg, evidence)


CHECK = Check("collectives_per_step", Spec, judge)
