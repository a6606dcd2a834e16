"""world_size_equivalence: the submission run at several world sizes (same global batch) ends at
the same parameters: summing instead of averaging, an unscaled learning rate or a per-rank batch
that does not shrink all show up as a difference."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, agreed_params, need
from grader.evidence.params import compare
from grader.roles import Role, RunRequest, run_name

if TYPE_CHECKING:
    from grader.manifest import Manifest


class Spec(CheckSpec):
    name: Literal["world_size_equivalence"]
    world_sizes: list[int] = [1, 2]
    rtol: float = Field(1e-3, ge=0)
    atol: float = Field(1e-4, ge=0)


def _run(n: int, manifest: Manifest) -> str:
    return run_name(Role.MAIN) if n == manifest.world_size else run_name(Role.WORLD_SIZE, n)


def runs(spec: Spec, manifest: Manifest) -> list[RunRequest]:
    return [RunRequest(Role.WORLD_SIZE, n) for n in spec.world_sizes if n != manifest.world_size]


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "world_size_equivalence"
    runs = {}
    for n in spec.world_sizes:
        role = _run(n, ctx.manifest)
        ev = need(ctx, name, role)
        if isinstance(ev, CheckResult):
            return ev
        params = agreed_params(ev, name)
        if isinstance(params, CheckResult):
            return params
        runs[n] = params
    first, *rest = spec.world_sizes
    evidence: dict[str, Any] = {"world_sizes": spec.world_sizes, "rtol": spec.rtol, "atol": spec.atol}
    for n in rest:
        cmp = compare(runs[n], runs[first], spec.rtol, spec.atol)
        evidence[f"{first}_vs_{n}"] = cmp
        if not cmp["close"]:
            detail = (f"largest difference {cmp['max_abs_diff']:.3g} ({cmp['max_rel_diff']:.2%} of its norm) in "
                      f"{cmp['worst_param']}" if cmp.get("same_structure") else cmp.get("problem", "the parameter sets differ"))
            steps = {k: max((o.steps for o in ctx.runs[_run(k, ctx.manifest)].ranks.values()), default=0)
                     for k in (first, n)}
            evidence["steps"] = steps
            return CheckResult(name, False, f"run at world size {n}, the script ends at different parameters "
                               f"from world size {first}: {detail} (steps per rank: "
                               f"{steps[first]} at world size {first}, {steps[n]} at {n})", evidence)
    return CheckResult(name, True, f"world sizes {', '.join(map(str, spec.world_sizes))} end at the same "
                       f"parameters within rtol={spec.rtol:g}, atol={spec.atol:g}", evidence)


CHECK = Check("world_size_equivalence", Spec, judge, runs=runs,
              property='the script trains the same model at every world size that divides the batch')
