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


def compare(a: dict[str, Any], b: dict[str, Any], rtol: float, atol: float, equal_nan: bool = False) -> dict[str, Any]:
    """How far two name->tensor dicts are apart, and whether they agree within tolerance.

    NaN and inf never compare close to a number (nor NaN to NaN, unless ``equal_nan``: replicas
    corrupted alike are still replicas); ``nonfinite_first`` / ``nonfinite_second`` count them, and
    an element finite in one and not in the other makes ``max_abs_diff`` inf."""
    import torch

    if set(a) != set(b):
        return {"same_names": False, "only_first": sorted(set(a) - set(b))[:5],
                "only_second": sorted(set(b) - set(a))[:5], "close": False}
    worst_name, worst_abs, worst_rel, close = None, 0.0, 0.0, True
    bad_a = bad_b = total = 0
    for name in sorted(a):
        x, y = a[name].double(), b[name].double()
        if x.shape != y.shape:
            return {"same_names": True, "close": False, "shape_mismatch": name,
                    "shapes": [list(x.shape), list(y.shape)]}
        fx, fy = torch.isfinite(x), torch.isfinite(y)
        bad_a += int((~fx).sum())
        bad_b += int((~fy).sum())
        total += x.numel()
        both = fx & fy
        diff = (x - y).abs()[both]
        abs_max = float(diff.max()) if diff.numel() else 0.0
        alike = (x == y) | (torch.isnan(x) & torch.isnan(y)) if equal_nan else (x == y)
        if bool(((~fx | ~fy) & ~alike).any()):
            abs_max = float("inf")
        # relative to the tensor's size, not element-wise: near-zero elements make those meaningless
        rel = float((x - y)[both].norm() / y[both].norm().clamp_min(1e-12)) if diff.numel() else 0.0
        if abs_max == float("inf"):
            rel = float("inf")
        if not torch.allclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan):
            close = False
        if abs_max > worst_abs:
            worst_name, worst_abs, worst_rel = name, abs_max, rel
    out = {"same_names": True, "close": close, "max_abs_diff": worst_abs,
           "max_rel_diff": worst_rel, "worst_param": worst_name}
    if bad_a or bad_b:
        out.update(nonfinite_first=bad_a, nonfinite_second=bad_b, elements=total)
    return out


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
        cmp = compare(ev.params(r), base, rtol=0.0, atol=1e-6, equal_nan=True)
        if not cmp["close"]:
            return {"rank": r, **cmp}
    return None
