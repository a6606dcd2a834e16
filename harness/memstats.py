"""Memory from signals a process cannot cheaply offset: the live tensors a rank holds and the
autograd graph nodes reachable from them, counted every few optimizer steps.

RSS can be offset from inside (a balloon of pre-touched memory released as a leak grows keeps it
flat), and so can an allocator's in-use bytes (the balloon can be a tensor). A kept graph grows
these counts whatever the process does with its bytes: to keep them flat a script would have to
stop keeping what it keeps, or start with a pile of tensors and graphs that shows as a level far
above the reference run's.

How: scanning every object the collector tracks is too slow for a step loop (120,000-290,000
objects after ``import torch``: 70-330 ms per scan on the 2-core machine). So at the end of the
first optimizer step of each process, once the imports, the model, the optimizer and the loaders
exist, the harness runs ``gc.collect()`` and ``gc.freeze()``: everything alive then moves to the
collector's permanent generation, which ``gc.get_objects()`` leaves out. A count then scans only
what was created since (a step's temporaries, and whatever the script keeps): tensors
(``live_tensors``) and autograd nodes, and walks the graphs from those (``graph_nodes``: distinct
nodes reachable through ``next_functions`` from every live tensor's ``grad_fn`` and every live
node). Side effect: objects alive at the first step are never visited by the cyclic collector
again; a reference cycle among them that becomes garbage later stays until the process exits.

Fields, in the step record of each counted step: ``live_tensors``, ``graph_nodes``, ``live_bytes``
(the bytes of the storages behind those tensors, each storage once: views share their base's, so a
count of tensors says nothing of their size; a few kept 0-dim tensors grow the count and not the
bytes), ``mem_ms`` (the count's own time), and ``gc_refrozen`` when the script called ``gc.freeze()`` itself after the
harness did (which hides what it froze from the count): how many times. The count runs at step 2, then every ``k`` steps, ``k`` chosen
after each count so that its time (the median of the last five counts) stays under ``BUDGET`` of the
steps' time since the previous one. Its time is not charged to any step's ``dt``.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
import warnings
import weakref
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from harness.instrument import Recorder  # which installs this module: imported only for the checker

BUDGET = 0.01  # of the step loop's time
MAX_EVERY = 64  # steps between counts at most


class MemStats:
    def __init__(self) -> None:
        self.frozen_count: int | None = None  # the script's gc.freeze() calls when the harness froze
        self.script_freezes = 0  # gc.freeze() calls by the script (gc.freeze is wrapped by install)
        self.next_step = 2  # at step 1 the freeze has just hidden everything: nothing to count yet
        self.every = 1
        self.counts = 0
        self._costs: list[float] = []  # the last few counts' times: one slow count (a busy machine) moves nothing
        self._last_t: float | None = None  # when the previous count ended
        self._last_step = 0
        self.modules: weakref.WeakSet[Any] = weakref.WeakSet()  # nn.Modules alive at the freeze

    def freeze(self) -> None:
        gc.collect()
        with warnings.catch_warnings():  # isinstance() on deprecated torch proxies warns
            warnings.simplefilter("ignore")
            for o in gc.get_objects():
                if isinstance(o, torch.nn.Module):
                    self.modules.add(o)
        _gc_freeze()
        self.frozen_count = self.script_freezes

    def on_step(self, step: int) -> dict[str, Any]:
        if self.frozen_count is None:
            self.freeze()
        if step < self.next_step:
            return {}
        t0 = time.perf_counter()
        tensors, nodes, nbytes = count()
        t1 = time.perf_counter()
        cost = t1 - t0
        out: dict[str, Any] = {"live_tensors": tensors, "graph_nodes": nodes, "live_bytes": nbytes,
                               "mem_ms": round(cost * 1e3, 3)}
        if self.frozen_count is not None and self.script_freezes > self.frozen_count:  # (set by freeze() above)
            out["gc_refrozen"] = self.script_freezes - self.frozen_count
        self._costs = (self._costs + [cost])[-5:]
        if self._last_t is not None and step > self._last_step:
            per_step = max((t0 - self._last_t) / (step - self._last_step), 1e-6)
            cost = statistics.median(self._costs)
            self.every = max(1, min(MAX_EVERY, math.ceil(cost / (BUDGET * per_step))))
        self._last_t, self._last_step = time.perf_counter(), step
        self.next_step = step + self.every
        self.counts += 1
        return out


# Per type: 1 for tensors, 2 for autograd graph nodes, 0 for anything else. ``isinstance`` against
# ``torch.Tensor`` (a metaclass check) and against ``Node`` (an ABC) took most of a count's time,
# about 0.2 and 0.4 us per object; a type's answer never changes, so each type is asked once.
# A subclass of either counts as it would under ``isinstance``; an object that only claims to be a
# tensor (its ``__class__`` says so, its type does not) holds no tensor memory and is not counted.
_KIND: dict[type, int] = {}


def _kind(tp: type) -> int:
    k = _KIND.get(tp)
    if k is None:
        with warnings.catch_warnings():  # issubclass() on deprecated torch proxies warns
            warnings.simplefilter("ignore")
            try:
                k = 1 if issubclass(tp, torch.Tensor) else 2 if issubclass(tp, torch.autograd.graph.Node) else 0
            except Exception:  # a type whose subclass check fails is neither
                k = 0
        _KIND[tp] = k
    return k


def count() -> tuple[int, int, int]:
    """(live tensors, autograd nodes reachable from them, bytes of those tensors' storages) among the
    objects the collector tracks outside its permanent generation."""
    kinds = _KIND
    tensors = 0
    storages: dict[tuple[str, int], int] = {}  # (device, data_ptr) -> nbytes: a storage shared by views once
    seen: dict[int, Any] = {}  # id -> node, kept alive while walking so ids stay unique
    stack: list[Any] = []
    objs = gc.get_objects()
    for o in objs:
        tp = type(o)
        k = kinds.get(tp)
        if k is None:
            k = _kind(tp)
        if k == 1:
            tensors += 1
            try:  # sparse, meta and some subclass tensors have no storage to read
                st = o.untyped_storage()
                if st.device.type != "meta":  # a meta tensor holds no memory
                    storages[(str(st.device), st.data_ptr())] = st.nbytes()
            except Exception:
                pass
            try:
                fn = o.grad_fn
            except Exception:
                fn = None
            if fn is not None:
                stack.append(fn)
        elif k == 2:
            stack.append(o)
    del objs
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        try:
            nxt = n.next_functions
        except Exception:
            continue
        for m, _ in nxt:
            if m is not None and id(m) not in seen:
                stack.append(m)
    return tensors, len(seen), sum(storages.values())


_stats: MemStats | None = None


def frozen_modules() -> list[torch.nn.Module]:
    """nn.Modules alive when the harness froze the collector (``gc.get_objects`` no longer lists them)."""
    return list(_stats.modules) if _stats is not None else []


# gc.get_freeze_count() walks the whole permanent generation (47 ms per call at ~200,000 objects,
# measured): the script's freezes are counted by wrapping gc.freeze instead.
_gc_freeze = gc.freeze


def install(rec: Recorder) -> MemStats:
    global _stats
    _stats = MemStats()
    stats = _stats

    def freeze() -> None:
        stats.script_freezes += 1
        _gc_freeze()

    freeze.__doc__ = _gc_freeze.__doc__
    gc.freeze = freeze
    rec.step_fields.append(lambda: _stats.on_step(rec.step))
    return _stats
