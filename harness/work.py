"""The work behind each optimizer step: how many backward passes and outermost forward calls it
took, how many rows the model was fed, and in which floating-point dtype it computed.

The optimizer step hook sees the steps a script makes through ``torch.optim``; training done
around it (a restart that retrains from scratch up to its checkpoint with updates the hook never
sees, a rank that computes its peer's half of the batch too) still has to run the model forward
and backward. Counting that work per observed step, next to the samples the kit's datasets
recorded, shows it:

- ``backward_passes``: outermost calls of ``Tensor.backward``, ``torch.autograd.backward`` and
  ``torch.autograd.grad`` since the previous step (a call made while another is running, such as
  the recomputation of gradient checkpointing, is part of that one, on whatever thread; calls
  torch makes itself, such as ``torch.compile`` tracing a backward graph, are not the script's);
- ``forward_calls``: outermost calls of an ``nn.Module`` that holds parameters (a loss module at
  the top level is not a forward pass of the model; the submodules a model calls are part of it;
  calls made during a backward pass are recomputation, not counted);
- ``forward_rows``: the leading dimension of the first tensor each of those calls was given (the
  batch size, for the kit's models), summed;
- ``autocast``: per outermost forward call, the autocast dtype in force on its input's device
  (``"float16"``, ``"bfloat16"``), or ``"off"``: ``{dtype: calls}``;
- ``compute``: per outermost forward call, the dtype its matrix products run in, read where they
  run: at each call of a module that holds parameters of its own (a ``Linear``, an ``Embedding``;
  the first ``LEAF_CAP`` of the call), the autocast dtype where autocast is on for its parameters'
  device, else its parameters' dtype, weighted by how many elements they hold; the call's dtype
  is the heaviest. Autocast entered inside the model's own ``forward`` counts, and so do bf16
  weights with fp32 master copies in the optimizer: both read ``"bfloat16"``. ``{dtype: calls}``;
- ``backward_compute``: the rows of ``backward_rows`` (below) by the compute dtype of the call they
  went through, ``{dtype: rows}``: what the step trained on, in which precision (a module called in
  bf16 on no rows, or outside the backward pass, trains nothing);
- ``backward_rows``: the samples the step trained on: the rows of the outermost forward calls
  (this step's or earlier ones') whose output a backward pass since the previous step went through,
  each call counted once however many passes reached it; ``backward_max_rows``: the largest of
  those calls (the micro-batch); ``backward_blind``: backward passes that went through no counted
  forward call (a loss computed without calling a module, or ``module.forward`` called directly),
  whose samples cannot be counted. How: a pre-hook on the autograd node of each counted call's
  output (made with gradients enabled), which fires when a backward pass reaches it, so an
  evaluation's forward pass that is never backpropagated is not training, with or without
  ``no_grad``, and gradient accumulation over micro-batches counts the samples once each.

The counts after the last step go into the exit record (``tail_*``). Cost: one attribute check per
nested module call, a parameter lookup at the first ``LEAF_CAP`` parameter-holding ones, and a few
dictionary operations per outermost one (``benchmarks/evidence_cost.py``).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import weakref
from typing import Any

import torch

_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


LEAF_CAP = 64  # parameter-holding module calls read per outermost call: the cost stays flat on a large model


class _Local(threading.local):
    def __init__(self) -> None:  # run once in each thread that touches it
        self.busy = False  # inside an outermost module call on this thread
        self.leaves = 0  # parameter-holding module calls read in the current outermost call
        self.weights: dict[str, int] = {}  # compute dtype -> parameter elements, in the current outermost call


class WorkCounter:
    def __init__(self) -> None:
        self.backward = 0
        self.forward = 0
        self.rows = 0
        self.autocast: dict[str, int] = {}
        self.compute: dict[str, int] = {}
        self.backward_compute: dict[str, int] = {}
        self.backward_rows = 0
        self.backward_max_rows = 0
        self.backward_blind = 0
        self.reached = False  # a counted forward call's output was reached in the running backward pass
        self.in_backward = 0  # process-wide: a backward pass is running on some thread
        self._tls = _Local()
        self._has_params: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def take(self) -> dict[str, Any]:
        """This step's counts (then zero)."""
        out: dict[str, Any] = {"backward_passes": self.backward, "forward_calls": self.forward,
                               "forward_rows": self.rows, "backward_rows": self.backward_rows,
                               "backward_max_rows": self.backward_max_rows, "backward_blind": self.backward_blind}
        if self.autocast:
            out["autocast"] = self.autocast
        if self.compute:
            out["compute"] = self.compute
        if self.backward_compute:
            out["backward_compute"] = self.backward_compute
        self.backward = self.forward = self.rows = 0
        self.backward_rows = self.backward_max_rows = self.backward_blind = 0
        self.autocast = {}
        self.compute = {}
        self.backward_compute = {}
        return out

    def tail(self) -> dict[str, Any]:
        return {f"tail_{k}": v for k, v in self.take().items()}

    # -- forward -----------------------------------------------------------------------------
    def holds_parameters(self, mod: torch.nn.Module) -> bool:
        if self._has_params.get(mod):
            return True
        try:
            found = next(mod.parameters(), None) is not None
        except Exception:
            return False
        if found:  # only a yes is kept: a lazy module gets its parameters at its first call
            self._has_params[mod] = True
        return found

    def outermost(self, mod: torch.nn.Module, args: tuple, kwargs: dict) -> int | None:
        """Count one outermost call; its rows (0 without a batched tensor input), or None when the
        module holds no parameters (not a forward pass of a model)."""
        self._tls.leaves, self._tls.weights = 0, {}  # this call's leaves, whatever it turns out to be
        if not self.holds_parameters(mod):
            return None
        self.forward += 1
        t = _first_tensor(args, kwargs)
        rows = 0
        if t is None:
            key = "off"
        else:
            if t.dim():
                rows = int(t.shape[0])
                self.rows += rows
            key = _autocast_dtype(t.device.type)
        self.autocast[key] = self.autocast.get(key, 0) + 1
        self.leaf(mod)  # the outermost module's own parameters, where it has any
        return rows

    def leaf(self, mod: torch.nn.Module) -> None:
        """Weigh a call of ``mod`` by the parameters it holds itself (not its submodules'), in the
        dtype it computes in."""
        tls = self._tls
        if tls.leaves >= LEAF_CAP:
            return
        held = getattr(mod, "_parameters", None)
        if not held:  # most nested calls (activations, containers): nothing to read
            return
        own = [p for p in held.values() if p is not None and p.is_floating_point()]
        if not own:
            return
        tls.leaves += 1
        key = _autocast_dtype(own[0].device.type)
        if key == "off":
            key = str(own[0].dtype).replace("torch.", "")
        tls.weights[key] = tls.weights.get(key, 0) + sum(p.numel() for p in own)

    def computed(self) -> str:
        """The current outermost call's compute dtype, counted: the heaviest of its leaves'."""
        weights = self._tls.weights
        key = max(weights, key=lambda k: weights[k]) if weights else "off"
        self.compute[key] = self.compute.get(key, 0) + 1
        return key

    def watch(self, out: Any, rows: int, compute: str = "off") -> None:
        """Hook the autograd node of a counted call's output (made with gradients enabled): the
        first backward pass that reaches it adds its rows to the step it belongs to."""
        if not torch.is_grad_enabled():
            return
        nodes = {id(n): n for n in _grad_fns(out)}
        if not nodes:
            return
        cell = [rows, False]  # the call's rows, already counted

        def reached(grad_outputs):
            self.reached = True
            if not cell[1]:
                cell[1] = True
                self.backward_rows += cell[0]
                self.backward_max_rows = max(self.backward_max_rows, cell[0])
                self.backward_compute[compute] = self.backward_compute.get(compute, 0) + cell[0]

        for n in nodes.values():
            n.register_prehook(reached)


def _first_tensor(args: tuple, kwargs: dict) -> torch.Tensor | None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            return a
        if isinstance(a, (list, tuple)):
            for x in a[:4]:
                if isinstance(x, torch.Tensor):
                    return x
        elif isinstance(a, dict):
            for x in list(a.values())[:4]:
                if isinstance(x, torch.Tensor):
                    return x
    return None


def _grad_fns(out: Any) -> list:
    """The autograd nodes of the first few tensors of a module's output (a tensor, a sequence, a
    mapping such as a transformers ModelOutput), where they have one."""
    if isinstance(out, torch.Tensor):
        items: list = [out]
    elif isinstance(out, (list, tuple)):
        items = list(out[:4])
    elif isinstance(out, dict):
        items = list(out.values())[:4]
    else:
        return []
    return [t.grad_fn for t in items if isinstance(t, torch.Tensor) and t.grad_fn is not None]


def _autocast_dtype(device_type: str) -> str:
    try:
        if not torch.is_autocast_enabled(device_type):
            return "off"
        return str(torch.get_autocast_dtype(device_type)).replace("torch.", "")
    except Exception:  # a device type autocast does not know
        return "off"


def install(rec) -> WorkCounter:
    """Count on ``rec``'s steps: its step records and exit record get the fields above."""
    w = WorkCounter()
    tls = w._tls

    orig_call = torch.nn.Module.__call__

    @functools.wraps(orig_call)
    def __call__(mod, *args, **kwargs):
        if w.in_backward:
            return orig_call(mod, *args, **kwargs)
        if tls.busy:
            if tls.leaves < LEAF_CAP:
                try:
                    w.leaf(mod)
                except Exception:  # never let the count break the script's forward
                    pass
            return orig_call(mod, *args, **kwargs)
        tls.busy = True
        try:
            try:
                rows = w.outermost(mod, args, kwargs)
            except Exception:  # never let the count break the script's forward
                rows = None
            out = orig_call(mod, *args, **kwargs)
            if rows is not None:
                try:
                    w.watch(out, rows, w.computed())
                except Exception:
                    pass
            return out
        finally:
            tls.busy = False

    torch.nn.Module.__call__ = __call__  # type: ignore[method-assign]  # patched in place in the rank: how the harness observes it

    def wrap(fn):
        @functools.wraps(fn)
        def backward(*args, **kwargs):
            # torch's own calls (torch.compile tracing a backward graph, torch.func) are not the
            # script's backward passes
            outer = not w.in_backward and not sys._getframe(1).f_code.co_filename.startswith(_TORCH)
            if outer:
                w.backward += 1
                w.reached = False
            w.in_backward += 1
            try:
                return fn(*args, **kwargs)
            finally:
                w.in_backward -= 1
                if outer and not w.reached:
                    w.backward_blind += 1
        return backward

    torch.Tensor.backward = wrap(torch.Tensor.backward)  # type: ignore[method-assign]  # patched in place in the rank: how the harness observes it
    torch.autograd.backward = wrap(torch.autograd.backward)
    torch.autograd.grad = wrap(torch.autograd.grad)
    rec.step_fields.append(w.take)
    rec.exit_fields.append(w.tail)
    return w
