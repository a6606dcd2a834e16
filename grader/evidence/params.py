"""Reading parameters: comparing two name->tensor dicts, the names a wrapper adds, and a run's
final parameters once every rank agrees on them."""

from __future__ import annotations

from typing import Any

WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DDP / FSDP1 wrappers, torch.compile


def strip_wrappers(name: str) -> str:
    for prefix in WRAPPER_PREFIXES:
        while name.startswith(prefix):
            name = name[len(prefix):]
    return name


def compare(a: dict[str, Any], b: dict[str, Any], rtol: float, atol: float) -> dict[str, Any]:
    """How far two name->tensor dicts are apart, and whether they agree within tolerance."""
    import torch

    if set(a) != set(b):
        return {"same_names": False, "only_first": sorted(set(a) - set(b))[:5],
                "only_second": sorted(set(b) - set(a))[:5], "close": False}
    worst_name, worst_abs, worst_rel, close = None, 0.0, 0.0, True
    for name in sorted(a):
        x, y = a[name].double(), b[name].double()
        if x.shape != y.shape:
            return {"same_names": True, "close": False, "shape_mismatch": name,
                    "shapes": [list(x.shape), list(y.shape)]}
        diff = (x - y).abs()
        abs_max = float(diff.max()) if diff.numel() else 0.0
        # relative to the tensor's size, not element-wise: near-zero elements make those meaningless
        rel = float((x - y).norm() / y.norm().clamp_min(1e-12)) if diff.numel() else 0.0
        if not torch.allclose(x, y, rtol=rtol, atol=atol):
            close = False
        if abs_max > worst_abs:
            worst_name, worst_abs, worst_rel = name, abs_max, rel
    return {"same_names": True, "close": close, "max_abs_diff": worst_abs,
            "max_rel_diff": worst_rel, "worst_param": worst_name}


def disagreement(ev) -> dict[str, Any] | None:
    """Why a run's final parameters cannot be used: a rank left none, or the replicas diverged
    (``{"missing_ranks": [...]}`` or ``{"rank": r, **compare(...)}``); None when every rank holds
    the same parameters."""
    missing = [r for r in ev.ranks if ev.params(r) is None]
    if missing:
        return {"missing_ranks": missing}
    base = ev.params(0)
    for r in sorted(ev.ranks):
        if r == 0:
            continue
        cmp = compare(ev.params(r), base, rtol=0.0, atol=1e-6)
        if not cmp["close"]:
            return {"rank": r, **cmp}
    return None
