"""Reading parameters: comparing two name->tensor dicts matched by the model's structure
(``grader.evidence.align``), and a run's final parameters once every rank agrees on them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grader.evidence.align import aligned, strip_wrappers

if TYPE_CHECKING:
    from grader.evidence import RunEvidence

__all__ = ["compare", "disagreement", "strip_wrappers"]


def compare(a: dict[str, Any], b: dict[str, Any], rtol: float, atol: float, equal_nan: bool = False,
            max_rel: float | None = None) -> dict[str, Any]:
    """How far two name->tensor dicts are apart, and whether they agree within tolerance. The
    tensors are paired by the model's structure, whatever the names (``align``): ``same_structure``
    is False, with ``problem``, when no pairing exists; ``matched_by`` says how they were paired.
    Names in the result (``worst_param``) are ``b``'s.

    NaN and inf never compare close to a number (nor NaN to NaN, unless ``equal_nan``: replicas
    corrupted alike are still replicas); ``nonfinite_first`` / ``nonfinite_second`` count them, and
    an element finite in one and not in the other makes ``max_abs_diff`` inf.

    ``max_rel``: close when every tensor's relative difference (``||a - b|| / ||b||``) is at most
    this, instead of ``rtol``/``atol`` element by element: for arithmetic whose rounding may change
    (gradients summed on a 16-bit wire), where single elements move by more than the whole does."""
    import torch

    a, b, al = aligned(a, b)
    if not al.ok:
        return {"same_structure": False, "close": False, **al.to_json()}
    worst_name, worst_abs, worst_rel, close = None, 0.0, 0.0, True
    most_rel, most_rel_name = 0.0, None  # the largest per-tensor relative difference, and where
    bad_a = bad_b = total = 0
    for name in sorted(a):
        x, y = a[name].double(), b[name].double()
        if x.shape != y.shape:
            return {"same_structure": False, "close": False, "shape_mismatch": name,
                    "shapes": [list(x.shape), list(y.shape)], **al.to_json()}
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
        if max_rel is not None:
            if not rel <= max_rel:  # NaN and inf included
                close = False
        elif not torch.allclose(x, y, rtol=rtol, atol=atol, equal_nan=equal_nan):
            close = False
        if abs_max > worst_abs:
            worst_name, worst_abs, worst_rel = name, abs_max, rel
        if not rel <= most_rel:
            most_rel, most_rel_name = rel, name
    out = {"same_structure": True, "matched_by": al.how, "close": close, "max_abs_diff": worst_abs,
           "max_rel_diff": worst_rel, "worst_param": worst_name,
           "max_tensor_rel_diff": most_rel, "worst_rel_param": most_rel_name}
    if bad_a or bad_b:
        out.update(nonfinite_first=bad_a, nonfinite_second=bad_b, elements=total)
    return out


def disagreement(ev: RunEvidence) -> dict[str, Any] | None:
    """Why a run's final parameters cannot be used: a rank left none, or the replicas diverged
    (``{"missing_ranks": [...]}`` or ``{"rank": r, **compare(...)}``); None when every rank holds
    the same parameters."""
    held = {r: p for r in ev.ranks if (p := ev.params(r)) is not None}
    missing = [r for r in ev.ranks if r not in held]
    if missing:
        return {"missing_ranks": missing}
    base = ev.params(0)
    if base is None:  # ranks without rank 0: nothing to compare against
        return {"missing_ranks": [0]}
    for r in sorted(held):
        if r == 0:
            continue
        cmp = compare(held[r], base, rtol=0.0, atol=1e-6, equal_nan=True)
        if not cmp["close"]:
            return {"rank": r, **cmp}
    return None
