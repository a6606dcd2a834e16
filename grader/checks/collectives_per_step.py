"""collectives_per_step: how many collectives the script issues per optimizer step, and how much
gradient data it reduces, from the harness's trace at the c10d dispatcher (which sees every API:
``torch.distributed`` calls, DDP's C++ bucket all-reduces, FSDP2, DTensor).

- ``max_per_step``: one all-reduce per parameter, or a sync on every accumulation micro-step,
  multiplies the count (DDP's bucketed all-reduces count one per bucket). The count is the median
  over the optimizer steps after the first (collectives before it are set-up: broadcasting the
  initial weights), so a one-off exchange (DDP rebuilding its buckets in the second step, a
  checkpoint's barrier) does not move it;
- ``min_gradient_share``: a job that is meant to be data-parallel must reduce its gradients every
  optimizer step. The bytes each rank hands to reducing collectives (``all_reduce`` and its
  coalesced form, ``reduce``, ``reduce_scatter`` in every form; the ``bytes`` of each trace record:
  the input on this rank) during each step's iteration must reach this share of the model's
  gradient bytes (the workload's ``params`` in fp32). A "fix" where every rank computes the whole
  global batch itself and never communicates fails, naming the bytes seen per step. Gradient
  compression (fp16 or bf16 hooks) halves the bytes, so a share of 0.5 still lets it through.

The trace is written in the rank. In a sandboxed run on gloo the parent also counts the bytes the
run's own loopback carried (``grader.evidence.traffic``): where the trace claims far more than went
over the wire (records the script wrote itself, collectives faked), the check fails on the parent's
count, whatever the trace says.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need
from grader.evidence import traffic

if TYPE_CHECKING:
    from grader.evidence import RunEvidence

REDUCING = {"all_reduce", "all_reduce_coalesced", "reduce", "reduce_scatter", "reduce_scatter_single",
            "reduce_scatter_single_coalesced"}
GRAD_BYTES_PER_PARAM = 4  # fp32 gradients


class Spec(CheckSpec):
    """Collectives per optimizer step (every collective the trace sees, DDP's buckets included),
    and optionally the gradient bytes reduced per step."""

    name: Literal["collectives_per_step"]
    max_per_step: float = Field(gt=0)
    # each optimizer step must reduce at least this share of the model's fp32 gradient bytes
    min_gradient_share: float | None = Field(None, gt=0)


def _mb(n: float) -> str:
    return f"{n / 2**20:.2f} MB" if n >= 2**16 else f"{n:.0f} B"


def _gradient_bytes(ev: RunEvidence, r: int, steps: int) -> tuple[list[float], bool]:
    """Per optimizer step of the rank's last attempt, the bytes it handed to reducing collectives
    during that step's iteration; and whether every such record says its bytes (an older trace
    does not)."""
    recs = ev.collective_records(r)
    last = max((int(x.get("a", 0)) for x in recs), default=0)
    per = [0.0] * steps
    known = True
    for x in recs:
        if x.get("ph") != "enter" or int(x.get("a", 0)) != last or x.get("op") not in REDUCING:
            continue
        s = int(x.get("step", 0))
        if not 0 <= s < steps:
            continue
        if not isinstance(x.get("bytes"), int):
            known = False
            continue
        per[s] += x["bytes"]
    return per, known


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "collectives_per_step"
    ev = need(ctx, name, "main")
    if isinstance(ev, CheckResult):
        return ev
    per_rank: dict[int, int] = {}
    most: dict[int, int] = {}
    ops: Counter[str] = Counter()
    for r, obs in sorted(ev.ranks.items()):
        recs = ev.collective_records(r)
        last = max((int(x.get("a", 0)) for x in recs), default=0)
        # collectives before the first step (set-up broadcasts) do not count
        recs = [x for x in recs if x.get("ph") == "enter" and int(x.get("a", 0)) == last and x.get("step", 0) >= 1]
        ops.update(x["op"] for x in recs)
        counts = Counter(int(x["step"]) for x in recs)
        per_step = sorted(counts.get(s, 0) for s in range(1, max(obs.steps, 2)))
        per_rank[r] = per_step[len(per_step) // 2]
        most[r] = per_step[-1]
    worst = max(per_rank.values(), default=0)
    evidence: dict[str, Any] = {"per_step": per_rank, "most_in_a_step": most, "max_per_step": spec.max_per_step,
                "ops": dict(ops.most_common(5))}
    common = ", ".join(f"{op} x{n}" for op, n in ops.most_common(3)) or "none"
    msg = (f"{worst:g} collectives per optimizer step (median over the steps after the first; most common: "
           f"{common}); at most {spec.max_per_step:g} allowed")
    problems = [msg] if worst > spec.max_per_step else []
    if spec.min_gradient_share and ev.world_size > 1:
        model = ctx.manifest.workload.params * GRAD_BYTES_PER_PARAM
        want = spec.min_gradient_share * model
        evidence.update(model_gradient_bytes=model, min_gradient_share=spec.min_gradient_share, gradient_bytes={})
        for r, obs in sorted(ev.ranks.items()):
            per, known = _gradient_bytes(ev, r, obs.steps)
            if not known or not per:
                continue
            short = [i for i, b in enumerate(per) if b < want]
            ordered = sorted(per)
            evidence["gradient_bytes"][r] = {"median_per_step": ordered[len(ordered) // 2], "least": ordered[0],
                                             "steps_short": len(short)}
            if short and not any("of gradients during" in p for p in problems):  # the first rank says it
                problems.append(
                    f"rank {r} reduced {_mb(per[short[0]])} of gradients during optimizer step {short[0] + 1}, and less "
                    f"than {spec.min_gradient_share:.0%} of the model's gradients ({_mb(model)}: "
                    f"{ctx.manifest.workload.params} fp32 parameters) in {len(short)} of its {len(per)} steps "
                    f"(median {_mb(ordered[len(ordered) // 2])} per step): a data-parallel step communicates its "
                    "gradients")
        seen = [v["median_per_step"] for v in evidence["gradient_bytes"].values()]
        if seen:
            msg += f"; {_mb(min(seen))} of gradients reduced per step (median), the model's are {_mb(model)}"
    tr = ev.traffic
    if tr is not None:
        evidence["traffic"] = tr.to_json()
        if (what := traffic.unsent(tr)) is not None:
            problems.append(what)
    if problems:
        return CheckResult(name, False, "; ".join(problems), evidence)
    return CheckResult(name, True, msg, evidence)


CHECK = Check("collectives_per_step", Spec, judge,
              property='gradients travel in few collectives per optimizer step, carrying the gradient bytes')
