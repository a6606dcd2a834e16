"""What a checkpoint holds, recognised by content, never by the reference's key names.

A candidate may save the model under ``"model"``, ``"state_dict"``, ``"net"`` or as a whole
``nn.Module``; the GradScaler under ``"scaler"``, ``"amp"`` or ``"grad_scaler"``; the step as
``"step"``, ``"iter_num"`` or ``"global_step"``; and add what a careful resume keeps (RNG states,
the config, a data-loader position). The brief asks that the state be there, not what it is
called, so each kind of state is recognised by what it is:

- **model**: a dict of tensors whose structure matches the run's final parameters
  (``grader.evidence.align``: names, names relative to the model, or shapes in order);
- **optimizer**: ``param_groups`` (a list of dicts of hyperparameters) and ``state``; hollow when
  its hyperparameters say it keeps per-parameter state and it holds no tensor of it;
- **scheduler**: ``last_epoch`` and ``base_lrs`` (every ``torch.optim.lr_scheduler``);
- **scaler**: a positive number under a key naming a scale, and an integer count beside it
  (``torch.amp.GradScaler.state_dict()``'s ``scale`` and ``_growth_tracker``, or a hand-written
  dynamic scale's);
- **step**: an integer equal to the number of optimizer steps the run had made, anywhere;
- a **value** the reference's checkpoint holds (a validation loss, a token count): a number in
  the candidate's checkpoint equal to it within tolerance, under whatever key.

Nested dicts, lists and tuples are searched to ``DEPTH`` levels (a trainer state of model,
optimizer and scheduler, each with its own dict, is three deep).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from grader.evidence.align import align

DEPTH = 4
KINDS = ("model", "optimizer", "scheduler", "scaler", "step")
WHAT = {"model": "model parameters", "optimizer": "optimizer state", "scheduler": "LR scheduler state",
        "scaler": "loss-scaler state", "step": "step count"}


def walk(obj: Any, depth: int = DEPTH) -> Iterator[tuple[str, Any]]:
    """Every value of a nested checkpoint with its path ("a.b.0"), the object itself first."""
    stack: list[tuple[str, Any, int]] = [("", obj, depth)]
    while stack:
        path, v, d = stack.pop(0)
        yield path, v
        if d == 0:
            continue
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, (list, tuple)) else ()
        for k, x in items:
            stack.append((f"{path}.{k}" if path else str(k), x, d - 1))


def find(obj: Any, pred: Callable[[Any], bool], depth: int = DEPTH) -> str | None:
    """The path of the first value (breadth first) that ``pred`` accepts, or None."""
    return next((p for p, v in walk(obj, depth) if pred(v)), None)


def tensors_of(d: Any) -> dict[str, Any]:
    return {str(k): v for k, v in d.items() if hasattr(v, "shape")} if isinstance(d, dict) else {}


def model_states(obj: Any, final: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """Every dict in ``obj`` whose tensors match the final parameters' structure (any dict with
    tensors, when ``final`` is None), with its path."""
    out = []
    for path, v in walk(obj):
        t = tensors_of(v)
        if not t:
            continue
        if final is None:
            out.append((path, t))
            continue
        # a model's state dict may also hold buffers (running statistics): match its parameters
        sub = _parameters_in(t, final)
        if sub is not None:
            out.append((path, sub))
    return out


def _parameters_in(state: dict[str, Any], final: dict[str, Any]) -> dict[str, Any] | None:
    """The entries of ``state`` that are the model's parameters, renamed to ``final``'s names."""
    al = align(state, final)
    if al.ok:
        return {y: state[x] for x, y in al.pairs}
    if len(state) <= len(final):
        return None
    # buffers besides the parameters: keep the names that pair with final's, by name then by shape
    from grader.evidence.align import strip_wrappers

    finals = {strip_wrappers(n) for n in final}
    by_name = {k: v for k, v in state.items() if strip_wrappers(k) in finals or
               any(strip_wrappers(k).endswith("." + f) for f in finals)}
    if len(by_name) == len(final):
        al = align(by_name, final)
        if al.ok:
            return {y: by_name[x] for x, y in al.pairs}
    return None


def looks_like_optimizer(d: Any) -> bool:
    """An optimizer's state dict: ``param_groups`` (dicts of hyperparameters) and ``state`` (a DCP
    checkpoint of an empty ``state`` has no entry for it at all)."""
    if not isinstance(d, dict) or not isinstance(d.get("param_groups"), list) or not d["param_groups"]:
        return False
    if not all(isinstance(g, dict) and ("params" in g or "lr" in g) for g in d["param_groups"]):
        return False
    return isinstance(d.get("state", {}), dict)


# hyperparameters by which an optimizer's param_groups say it keeps state per parameter: Adam and
# its kin (betas), RMSprop (alpha), Adagrad (lr_decay), Adadelta (rho), Rprop (etas), ASGD (lambd);
# SGD only with momentum
_STATEFUL = ("betas", "alpha", "lr_decay", "initial_accumulator_value", "rho", "etas", "lambd")


def hollow_optimizer(d: Any) -> str | None:
    """Why an optimizer state dict holds none of the per-parameter state its optimizer keeps (None:
    it holds some, or its optimizer keeps none)."""
    groups = [g for g in d.get("param_groups", []) if isinstance(g, dict)]
    keeps = sorted({k for g in groups for k in _STATEFUL if k in g}
                   | ({"momentum"} if any((g.get("momentum") or 0) > 0 for g in groups) else set()))
    if not keeps:
        return None

    def has_tensor(x: Any, key: str = "") -> bool:
        if hasattr(x, "shape") and key != "step":
            return True
        if isinstance(x, dict):
            return any(has_tensor(v, str(k)) for k, v in x.items())
        if isinstance(x, (list, tuple)):
            return any(has_tensor(v) for v in x)
        return False

    if has_tensor(d.get("state", {})):
        return None
    n = len(d.get("state", {}))
    what = "no per-parameter state" if not n else f"state for {n} parameters but no tensors in it (step counts only)"
    return f"its param_groups are an optimizer's that keeps per-parameter state ({', '.join(keeps)}), and it holds {what}"


def is_optimizer(d: Any) -> bool:
    return looks_like_optimizer(d) and hollow_optimizer(d) is None


def is_scheduler(d: Any) -> bool:
    return isinstance(d, dict) and "last_epoch" in d and "base_lrs" in d


def is_scaler(d: Any) -> bool:
    """A dynamic loss scale's state: a positive scale under a key that says so, and the integer count
    it grows by (``torch.amp.GradScaler``: ``scale`` and ``_growth_tracker``; a hand-written one:
    ``{"scale", "growth_interval", "clean_steps"}``, say)."""
    if not isinstance(d, dict):
        return False
    scales = [n for k, v in d.items() if "scale" in str(k).lower() and (n := _number(v)) is not None and n > 0]
    counts = [v for k, v in d.items() if "scale" not in str(k).lower() and isinstance(v, int)
              and not isinstance(v, bool)]
    return bool(scales) and bool(counts)


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if hasattr(v, "shape") and tuple(v.shape) in ((), (1,)):
        try:
            return float(v.reshape(()).item())
        except (TypeError, ValueError, RuntimeError):
            return None
    return None


def find_step(obj: Any, steps: list[int] | None) -> str | None:
    """The path of an integer in ``steps`` (any integer when None) in the top two levels, outside
    the optimizer's own state (its per-parameter ``step`` counts sit deeper)."""
    for path, v in walk(obj, 2):
        n = _number(v)
        if n is None or not float(n).is_integer() or isinstance(v, float):
            continue
        if steps is None or int(n) in steps:
            return path or "(the checkpoint itself)"
    return None


def find_value(obj: Any, value: float, rtol: float = 1e-4, atol: float = 1e-6) -> str | None:
    """The path of a number within tolerance of ``value`` (a loss, a count), or None."""
    for path, v in walk(obj, 3):
        n = _number(v)
        if n is not None and math.isfinite(n) and abs(n - value) <= atol + rtol * abs(value):
            return path
    return None


def closest(obj: Any, value: float) -> tuple[str, float] | None:
    """The number nearest ``value`` (path, relative difference), for the evidence: how far the
    candidate's nearest figure was, whether or not it was within tolerance."""
    best = None
    for path, v in walk(obj, 3):
        n = _number(v)
        if n is None or not math.isfinite(n):
            continue
        rel = abs(n - value) / max(abs(value), 1e-12)
        if best is None or rel < best[1]:
            best = (path, rel)
    return best


def numbers(obj: Any, depth: int = 2) -> dict[str, float]:
    """Every scalar number in the top ``depth`` levels, by path (for saying what a checkpoint holds)."""
    return {p: n for p, v in walk(obj, depth) if p and (n := _number(v)) is not None}


def missing_state(obj: Any, require: Sequence[str], final: dict[str, Any] | None,
                  steps: list[int] | None = None) -> list[str]:
    """What of ``require`` (``KINDS``) the object lacks, each as the phrase "holds no ..." ends with."""
    out = []
    for k in require:
        if k == "model":
            found = bool(model_states(obj, final))
        elif k == "optimizer":
            found = find(obj, is_optimizer) is not None
            if not found and (why := first_hollow(obj)):
                out.append(f"optimizer state (the one it holds is hollow: {why})")
                continue
        elif k == "scheduler":
            found = find(obj, is_scheduler) is not None
        elif k == "scaler":
            found = find(obj, is_scaler) is not None
        else:
            found = find_step(obj, steps) is not None
        if not found:
            told = f" (no integer equal to the {steps[0]} steps done when it was written)" if k == "step" and steps else ""
            out.append(WHAT[k] + told)
    return out


def optimizer_moments(obj: Any) -> dict[str, dict[str, Any]] | None:
    """The first optimizer state in ``obj`` as ``{state name: {parameter index: tensor}}`` (Adam's
    ``exp_avg`` and ``exp_avg_sq``, SGD's ``momentum_buffer``; step counts left out), in the order of
    its parameter indices; None when it holds no optimizer state."""
    at = find(obj, looks_like_optimizer)
    if at is None:
        return None
    opt = dict(walk(obj))[at]
    out: dict[str, dict[str, Any]] = {}
    state = opt.get("state", {})
    for idx in sorted(state, key=lambda k: (not isinstance(k, int), k if isinstance(k, int) else str(k))):
        entry = state[idx]
        if not isinstance(entry, dict):
            continue
        for k, v in entry.items():
            if k != "step" and hasattr(v, "shape") and getattr(v, "dim", lambda: 0)() > 0:
                out.setdefault(str(k), {})[str(idx)] = v
    return out


def first_hollow(obj: Any) -> str | None:
    """Why the first optimizer state dict in ``obj`` is hollow (None: none is)."""
    return next((w for _, v in walk(obj) if looks_like_optimizer(v) and (w := hollow_optimizer(v))), None)


def summary(obj: Any) -> str:
    if isinstance(obj, dict):
        keys = [str(k) for k in obj][:6]
        return f"a dict of {len(obj)} entries: {', '.join(keys)}{', ...' if len(obj) > 6 else ''}"
    return f"a {type(obj).__name__}"
