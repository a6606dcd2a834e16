"""Faults a proper fix exists to survive, injected for grading. The kill faults are marked in the
rank (``harness.instrument``: the point is reached; ``await_kill``) and performed by the parent
(``harness.injector``).

``TRAINWRECK_OVERFLOW_AT=N`` (an exercise's ``[run] overflow_at_step``): the gradients of
optimizer step N overflow on every rank. When the outermost backward pass of that step's
iteration returns (after DDP has all-reduced, so every rank holds the same gradients), the first
element of the first parameter with a gradient, of the optimizer that stepped last, is set to
``inf`` on every rank, as a real fp16 overflow leaves it after the all-reduce. A
``torch.amp.GradScaler`` sees it in ``unscale_``/``step``, skips the update and lowers its scale; a
constant loss scale, or none, applies it and the weights become NaN. Only in a rank's first attempt
(step numbers restart in the next). Recorded as an ``overflow`` event: ``step``, ``param``.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import NoReturn

OVERFLOW_ENV = "TRAINWRECK_OVERFLOW_AT"


def await_kill() -> NoReturn:
    """Stop here until the parent kills this rank. The caller has sent the fault's record; the
    parent reads it and SIGKILLs the rank's whole process tree, whichever of its processes (a
    checkpoint writer the script forked) reached the point (``harness.injector``). Nothing in the
    rank kills: a script that removes this is killed from outside all the same."""
    while True:
        time.sleep(3600)


def install_overflow(rec, at: str) -> None:
    if not at or rec.attempt != 0:
        return
    import torch  # here: the grader reads OVERFLOW_ENV without importing torch

    step = int(at)
    depth = threading.local()
    done = [False]

    def inject() -> None:
        done[0] = True
        entries = [e for e in rec._opts.values()]
        if not entries:
            return
        _, params, _ = max(entries, key=lambda e: e[2])
        for p in params:
            g = p.grad
            if g is None or not g.numel():
                continue
            local = getattr(g, "_local_tensor", g)  # a DTensor gradient: this rank's shard
            with torch.no_grad():
                if local.dim():
                    local[(0,) * local.dim()] = float("inf")
                else:
                    local.fill_(float("inf"))
            rec.event("overflow", step=step, param=rec._names.get(id(p), "?"))
            return

    def wrap(fn):
        @functools.wraps(fn)
        def backward(*args, **kwargs):
            outer = not getattr(depth, "n", 0)
            depth.n = getattr(depth, "n", 0) + 1
            try:
                out = fn(*args, **kwargs)
            finally:
                depth.n -= 1
            if outer and not done[0] and rec.step == step - 1:
                try:
                    inject()
                except Exception as e:  # say so, never break the script's backward
                    rec.event("overflow", step=step, error=repr(e)[:300])
            return out
        return backward

    torch.Tensor.backward = wrap(torch.Tensor.backward)  # type: ignore[method-assign]  # patched in place in the rank: how the harness observes it
    torch.autograd.backward = wrap(torch.autograd.backward)
