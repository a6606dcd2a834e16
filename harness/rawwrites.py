"""Binary files a rank writes through ``open()``: traced as ``bytes`` operations, torn by the
checkpoint-write fault.

``harness.saves`` traces ``torch.save`` to a file, renames, copies and DCP's files where they
happen. A checkpoint serialised into memory (``torch.save(state, io.BytesIO())``) and written with
``open(path, "wb").write(...)`` goes around every one of them: the rename that publishes it would
move bytes the trace never saw, and the fault that tears the first checkpoint write after a step
would never find one. So ``open`` (``builtins.open`` and ``io.open``, one function) is wrapped in
the rank: a file opened for writing in binary mode, inside the run's working directory, is handed
back behind a thin proxy that records a ``bytes`` operation from its first write to its close (its
content is unknown to the trace: no fingerprints), and, with the save fault armed
(``saves.arm_tear``), lets half of its first write reach the disk, then waits for the parent to kill the rank.

Writes inside a traced call (``torch.save`` to a path opens its file with ``open``, a copy does,
DCP's streams do) are that call's own and are not traced twice. Text files (logs, metrics) are not
traced. Not traced: ``os.open``/``os.write``, ``os.fdopen``, and files outside the working
directory.
"""

from __future__ import annotations

import builtins
import functools
import io
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from harness import faults

_state = threading.local()  # depth of traced calls running on this thread


def busy() -> bool:
    return getattr(_state, "depth", 0) > 0


class inside:
    """Marks a traced call running on this thread: the files it opens are its own."""

    def __enter__(self) -> None:
        _state.depth = getattr(_state, "depth", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        _state.depth -= 1


def _writes(mode: str) -> bool:
    return "b" in mode and any(c in mode for c in "wxa+")


class _Traced:
    """A binary file open for writing: the first write outside a traced call begins a ``bytes``
    operation, ``close`` ends it. Everything else is the file's own."""

    def __init__(self, f: Any, path: str, trace: Any, tear: Callable[[], Any]):
        self._f, self._path, self._trace, self._tear = f, path, trace, tear
        self._seq: int | None = None
        self._t0 = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __iter__(self):
        return iter(self._f)

    def __enter__(self) -> _Traced:
        self._f.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _begin(self, data: Any) -> None:
        if self._seq is not None or busy():
            return
        tear = self._tear()
        if tear is not None:
            self._torn(data, tear)
        self._seq = self._trace.begin("bytes", self._path)
        self._t0 = time.perf_counter()

    def _torn(self, data: Any, tear: Any) -> None:
        """Half of this first write reaches the disk (traced as a write that never ended), then
        the rank dies."""
        self._trace.begin("bytes", self._path)
        b = bytes(memoryview(data))
        self._f.write(b[: len(b) // 2])
        self._f.flush()
        os.fsync(self._f.fileno())
        tear.killed(self._path)  # sends the fault's record: the parent kills the rank
        faults.await_kill()

    def write(self, data: Any) -> int:
        self._begin(data)
        return self._f.write(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def close(self) -> None:
        if self._f.closed:
            return
        self._f.close()
        if self._seq is not None:
            seq, self._seq = self._seq, None
            self._trace.end(seq, "bytes", self._t0, self._path)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def install(trace: Any, traced_path: Callable[[str | None], bool], work_dir: str,
            tear: Callable[[], Any]) -> None:
    """Wrap ``open`` in this rank. ``tear()`` is the armed save fault once its step has come (else
    None); it is disarmed by the first tear."""
    orig = builtins.open
    root = os.path.realpath(work_dir) + os.sep

    @functools.wraps(orig)
    def traced_open(file, mode="r", *args, **kwargs):
        f = orig(file, mode, *args, **kwargs)
        if not isinstance(mode, str) or not _writes(mode) or busy() or isinstance(file, int):
            return f
        try:
            path = os.path.realpath(os.fspath(file))
        except TypeError:
            return f
        if not path.startswith(root) or not traced_path(path):
            return f
        return _Traced(f, path, trace, tear)

    builtins.open = traced_open
    io.open = traced_open
