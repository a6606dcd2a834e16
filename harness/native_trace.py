"""The collective trace with its kernel in C++ (``harness/native/c10d_trace.cpp``): the records the
Python kernel in ``harness.collectives`` makes, field for field, at a fraction of its cost per
collective. The C++ kernel describes the call, reads the caller's frames (classifying each code
object once, here, with the Python kernel's own rules) and keeps the work; this side turns what it
gathered into records and sends them in the same batches.

Completions are noted when the works still open are looked at: at each new collective (in the
kernel, without the GIL), after a ``Work.wait`` (which also names the work, so its exit or its error
is noted at once), after a functional collective's wait, and before each batch leaves (``FLUSH_S``). So an ``exit`` can be up
to ``FLUSH_S`` later than the completion, never earlier, as with the Python kernel.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from harness import collectives, rundir

_API_NAMES: list[str] = []  # the torch.distributed functions seen issuing a collective, by index
_API_INDEX: dict[str, int] = {}
_LABELS = [label for _, label in collectives._BY]


def classify(code) -> tuple[bool, int, int]:
    """For the C++ kernel, once per code object: (a frame of the script, api index or -1, a bit
    per part of torch in ``collectives._BY`` order)."""
    user, api, labels = collectives._code_info(code)
    index = -1
    if api is not None:
        index = _API_INDEX.get(api, -1)
        if index < 0:
            index = _API_INDEX[api] = len(_API_NAMES)
            _API_NAMES.append(api)
    return user, index, sum(1 << i for i, label in enumerate(_LABELS) if label in labels)


def _by(mask: int, api: str | None) -> str | None:
    """``collectives._caller``'s rule: the first part of torch seen, in ``_BY`` order; a Python
    hook's own call (``backward`` with an api) is named by its api alone."""
    by = next((label for i, label in enumerate(_LABELS) if mask >> i & 1), None)
    return None if by == "backward" and api is not None else by


def operators() -> dict[str, tuple[list[int], int, int]]:
    """{operator: (tensor argument positions, the argument whose bytes count, async_op's position
    or -1)} for the c10d operators this torch has."""
    out = {}
    for name in collectives.OPS:
        packet = getattr(torch.ops.c10d, name, None)
        if packet is None:
            continue
        opov = packet.default
        args = [a.name for a in opov._schema.arguments]
        out[name] = (list(collectives.data_positions(opov)), 1 if name in collectives._OUTPUT_FIRST else 0,
                     args.index("async_op") if "async_op" in args else -1)
    return out


class NativeTracer(collectives.Tracer):
    kind = "native"

    def __init__(self, mod: ModuleType, writer: rundir.RecordWriter, attempt: int, step: Callable[[], int]):
        super().__init__(writer, attempt, step)
        self._mod = mod
        self._ops = [collectives.OPS[n] for n in mod.op_names()]
        self._sites: dict[tuple[int, int], str] = {}
        self._on = False  # the kernels registered

    def install(self) -> None:
        self.switch(True)
        self._start_flusher()

    def switch(self, on: bool) -> None:
        """Registers the kernels, or takes them out (benchmarks/harness_parts.py; a run never does)."""
        if on == self._on:
            return
        if on:
            self._mod.install(operators(), classify, threading.main_thread().ident, self._step())
        else:
            self._mod.uninstall()
        self._on = on

    def on_step(self, step: int) -> None:
        self._mod.set_step(step)  # completions: the kernel looks at each new collective

    def sweep(self) -> None:
        self._mod.sweep()

    def finished(self, work, error: BaseException | None = None) -> None:
        err = None if error is None else collectives.error_text(error)
        try:
            self._mod.finished(work, err)
        except Exception:  # not a c10d Work this torch binds: look at every open work instead
            self._mod.sweep()

    def settle(self, grace_s: float = 1.0) -> None:
        deadline = time.monotonic() + grace_s
        while self._mod.sweep() and time.monotonic() < deadline:
            time.sleep(0.01)
        self.flush()

    def flush(self) -> None:
        with self._flush_lock:
            self._mod.sweep()
            recs, late, dropped = self._mod.drain()
            self._send(self._records(recs, late, dropped))

    # -- records -----------------------------------------------------------------------------
    def _site(self, site: tuple[Any, int] | None) -> str | None:
        if site is None:
            return None
        code, line = site
        key = (id(code), line)  # the C++ side keeps the code object: its id is not reused
        text = self._sites.get(key)
        if text is None:
            text = self._sites[key] = f"{code.co_filename}:{line}"
        return text

    def _records(self, recs: list[tuple], late: list[tuple], dropped: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for seq, step, op, async_op, main, site, api, labels, t0, t1, nbytes, dtype, shapes, err in recs:
            api_name = _API_NAMES[api] if api >= 0 else None
            rec = {"a": self._attempt, "seq": seq, "op": self._ops[op], "ph": "enter", "site": self._site(site),
                   "api": api_name, "by": _by(labels, api_name), "shapes": shapes,
                   "dtype": collectives._dtype_name(dtype) if dtype is not None else None,
                   "bytes": nbytes if nbytes >= 0 else None, "step": step, "main": main}
            if async_op >= 0:
                rec["async"] = bool(async_op)
            rec["t"] = t0 / 1e9
            out.append(rec)
            if t1:
                out.append(self._end(seq, t1 / 1e9, err))
        out += [self._end(seq, t1 / 1e9, err) for seq, t1, err in late]
        if dropped:  # a buffer no flush emptied for a long while: say how many went unrecorded
            out.append({"a": self._attempt, "ph": "dropped", "n": dropped, "t": time.time()})
        return out
