"""checkpoint_valid: a checkpoint the script writes (a path relative to its working dir) loads and
holds the final parameters, was written by one rank (from the save trace), and carries the values
the reference run's checkpoint carries: a fix may not pass by deleting the work a collective
protected."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need
from grader.evidence.checkpoint import final_checkpoint


class Spec(CheckSpec):
    name: Literal["checkpoint_valid"]
    path: str
    key: str | None = None  # where the model state dict sits inside the checkpoint, if nested
    require_keys: list[str] = []  # other top-level keys the checkpoint must hold (e.g. "scaler")
    # top-level values (metrics, counters) that must equal the reference run's checkpoint: what a
    # collective in the checkpoint path computes cannot be dropped without this check noticing
    reference_keys: list[str] = []
    # from the save trace: one rank wrote it (every rank saving one path is a race, apex#629)
    single_writer: bool = True
    rtol: float = Field(1e-5, ge=0)
    atol: float = Field(1e-6, ge=0)


def judge(spec: Spec, ctx: Context) -> CheckResult:
    import torch

    name = "checkpoint_valid"
    ev = need(ctx, name, "main", ok_only=False)
    if isinstance(ev, CheckResult):
        return ev
    found = final_checkpoint(ev, spec.path, spec.key, spec.require_keys, spec.single_writer, spec.rtol, spec.atol)
    evidence, ckpt = found.evidence, found.content
    if not found.ok:
        return CheckResult(name, False, found.message, evidence)
    if spec.reference_keys:
        ref = need(ctx, name, "reference")
        if isinstance(ref, CheckResult):
            return ref
        theirs = torch.load(Path(ref.run_dir) / "work" / spec.path, map_location="cpu", weights_only=True)
        for k in spec.reference_keys:
            mine_v, ref_v = ckpt.get(k), theirs.get(k)
            # never the reference's figure: it could be copied into a checkpoint that skipped the work
            diff = _relative_difference(mine_v, ref_v)
            evidence.setdefault("reference_comparison", {})[k] = {"submission": _scalar(mine_v),
                                                                   "relative_difference": diff}
            if mine_v is None or not torch.allclose(torch.as_tensor(mine_v, dtype=torch.float64),
                                                    torch.as_tensor(ref_v, dtype=torch.float64),
                                                    rtol=1e-4, atol=1e-6):
                how = "is missing" if mine_v is None else f"is {_scalar(mine_v)}, {diff:.1%} away from the reference run's"
                return CheckResult(name, False, f"the checkpoint's {k!r} {how}", evidence)
    what = " and " + ", ".join(spec.reference_keys) + " as in the reference run" if spec.reference_keys else ""
    return CheckResult(name, True, f"the checkpoint at {spec.path} loads and holds the final parameters{what}",
                       evidence)


def _relative_difference(mine: Any, ref: Any) -> float | None:
    import torch

    if mine is None or ref is None:
        return None
    a, b = torch.as_tensor(mine, dtype=torch.float64), torch.as_tensor(ref, dtype=torch.float64)
    return round(float((a - b).norm() / b.norm().clamp_min(1e-12)), 6)


def _scalar(v: Any) -> Any:
    if hasattr(v, "tolist"):
        v = v.tolist()
    return round(v, 6) if isinstance(v, float) else v


CHECK = Check("checkpoint_valid", Spec, judge, needs_reference=lambda spec: bool(spec.reference_keys))
