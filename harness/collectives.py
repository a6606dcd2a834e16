"""The collective trace, taken where every API meets: torch's ``c10d::`` dispatcher operators.

``dist.all_reduce`` and every other ``torch.distributed`` function, the object collectives, the
coalesced variants, DDP's C++ bucket all-reduces, FSDP2's all-gathers and reduce-scatters, and the
functional collectives under DTensor all end in ``ProcessGroup::<op>`` in C++, which calls its
``c10d::<op>`` operator through the dispatcher. We register a Python kernel for each of those
operators at the ``BackendSelect`` key (in every dispatch, device-agnostic, and not excluded below
autograd, where the functional collectives' kernels run) that records the call and redispatches to
the backend's kernel. Nothing is wrapped by name, so a new Python entry point is seen too.

What the trace cannot see: collectives that bypass ``ProcessGroup`` (a backend object called
directly from C++, NCCL calls made by a custom kernel, ``monitored_barrier``'s inner exchanges).

An operator returns as soon as the backend has queued the work; the collective is done when its
``Work`` completes. So an ``enter`` record is written at the call, and ``exit`` (or ``error``) when
the rank is seen past it: when a ``Work.wait()`` on it returns (every synchronous
``torch.distributed`` call waits so), else when a check of the works still open finds it completed
(``Work.is_completed()``, at each new collective, after each functional-collective wait, at each
optimizer step and at the rank's exit), so an ``exit`` can be later than the completion, never
earlier. A collective with an ``enter`` and no ``exit`` was pending: issued, and not seen complete.
On NCCL, ``wait()`` returns once the stream waits for the work, so there ``exit`` means that (not
tried here: no GPU machine).

Records are buffered in the rank and leave in batches (``Tracer.flush``): every ``FLUSH_S`` (0.1 s)
from a thread, and at exit; a record's ``t`` is still when it happened.
A rank killed with SIGKILL loses at most its last ``FLUSH_S`` of records (the harness's own fault
injection flushes before it kills).
"""

from __future__ import annotations

import atexit
import itertools
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from harness import rundir

# c10d operator -> the torch.distributed name a user knows it by (the ProcessGroup method behind it).
OPS = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce_coalesced",
    "broadcast_": "broadcast", "reduce_": "reduce",
    "allgather_": "all_gather", "_allgather_base_": "all_gather_single",
    "allgather_coalesced_": "all_gather_coalesced",
    "allgather_into_tensor_coalesced_": "all_gather_single_coalesced",
    "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter_single",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter_single_coalesced",
    "alltoall_": "all_to_all", "alltoall_base_": "all_to_all_single",
    "gather_": "gather", "scatter_": "scatter", "barrier": "barrier",
    "monitored_barrier_": "monitored_barrier", "send": "send", "recv_": "recv",
    "recv_any_source_": "recv_any_source",
}
_HERE = os.path.dirname(os.path.abspath(__file__))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))
_C10D = os.path.join(_TORCH, "distributed", "distributed_c10d.py")
_FUNCOL = os.path.join(_TORCH, "distributed", "_functional_collectives.py")
# Which part of torch issued a collective, from the frames between the script and the operator.
_BY = (("distributed/fsdp/", "fsdp"), ("distributed/tensor/", "dtensor"),
       ("nn/parallel/distributed.py", "ddp"), ("autograd/", "backward"))
_AFTER_BACKEND_SELECT = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)

_lib: Any = None  # the torch.library registrations: alive as long as the process
_wait_lib: Any = None


def is_library(fn: str) -> bool:
    return (fn.startswith(_TORCH + os.sep) or fn.startswith(_HERE + os.sep) or fn.startswith("<")
            or ("/lib/python3" in fn and "site-packages" not in fn))


def _classify(code) -> tuple[bool, str | None, tuple[str, ...]]:
    """(outside the libraries, the torch.distributed api this code is, which parts of torch it is in)
    for one code object, from its file and function name alone."""
    fn, name = code.co_filename, code.co_name
    api = None
    if fn == _C10D and not name.startswith("_") and name != "wrapper":
        api = name
    elif fn == _FUNCOL and not name.startswith("_"):
        api = f"funcol.{name}"
    return not is_library(fn), api, tuple(label for frag, label in _BY if frag in fn)


# id(code object) -> _classify(code): every frame between a collective and the script is classified
# once per process, not at every collective (the walk is most of an ``enter`` record's cost). By id:
# a code object's hash is computed from its bytecode and constants at every lookup (about 0.2 us,
# several frames per collective). _KEPT holds the code objects so no id is reused: the functions of
# torch and of the script that issue collectives, a few hundred at most.
_CODES: dict[int, tuple[bool, str | None, tuple[str, ...]]] = {}
_KEPT: list[Any] = []


def _code_info(code) -> tuple[bool, str | None, tuple[str, ...]]:
    info = _CODES.get(id(code))
    if info is None:
        info = _CODES[id(code)] = _classify(code)
        _KEPT.append(code)
    return info


def user_site(frame) -> str | None:
    """``file:line`` of the innermost frame outside torch, the harness and the stdlib."""
    f = frame
    while f is not None:
        if _code_info(f.f_code)[0]:
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return None


def _caller(frame) -> tuple[str | None, str | None, str | None]:
    """(site, api, by): the script's line, the torch.distributed function that issued the operator
    (None when C++ did, as DDP's reducer does during backward), and which part of torch was between
    (``fsdp``, ``dtensor``, ``ddp``, or ``backward`` for C++ hooks in the autograd engine)."""
    api, site, seen = None, None, set[str]()
    f = frame
    while f is not None:
        code = f.f_code
        user, code_api, labels = _code_info(code)
        if user:
            site = f"{code.co_filename}:{f.f_lineno}"
            break
        if code_api is not None:
            api = code_api  # keep walking: the outermost public one (all_gather_object over all_gather)
        if labels:
            seen.update(labels)
        f = f.f_back
    by = next((label for _, label in _BY if label in seen), None)
    if by == "backward" and api is not None:  # a Python hook's own call: the api says it all
        by = None
    return site, api, by


# Operators whose first argument is the output and the second the input (gathers, scatters,
# reduce-scatters, all-to-all): their ``bytes`` are the second's. The rest take their data first.
_OUTPUT_FIRST = {"allgather_", "_allgather_base_", "allgather_coalesced_", "allgather_into_tensor_coalesced_",
                 "reduce_scatter_", "_reduce_scatter_base_", "reduce_scatter_tensor_coalesced_",
                 "alltoall_", "alltoall_base_", "gather_", "scatter_"}


def _bytes(args) -> int:
    """Bytes of the tensors in ``args`` (lists and lists of lists included)."""
    n = 0
    for a in args:
        if isinstance(a, torch.Tensor):
            n += a.numel() * a.element_size()
        elif isinstance(a, (list, tuple)):
            for x in a:
                if isinstance(x, torch.Tensor):
                    n += x.numel() * x.element_size()
                elif isinstance(x, (list, tuple)):
                    n += sum(t.numel() * t.element_size() for t in x if isinstance(t, torch.Tensor))
    return n


_DTYPES: dict[Any, str] = {}  # torch.dtype -> its name without "torch."


def _dtype_name(dtype) -> str:
    name = _DTYPES.get(dtype)
    if name is None:
        name = _DTYPES[dtype] = str(dtype).replace("torch.", "")
    return name


def _describe(args) -> tuple[list, str | None]:
    shapes: list[list[Any]] = []  # a tensor's shape, or a list's tensors' shapes
    dtype = None
    for a in args:
        if isinstance(a, torch.Tensor):
            shapes.append(list(a.shape))
            dtype = dtype or _dtype_name(a.dtype)
        elif isinstance(a, (list, tuple)) and a:
            flat = [t for x in a[:4] for t in (x if isinstance(x, (list, tuple)) else [x])]
            ts = [t for t in flat if isinstance(t, torch.Tensor)]
            if ts:
                shapes.append([list(t.shape) for t in ts[:4]])
                dtype = dtype or _dtype_name(ts[0].dtype)
        if len(shapes) >= 2:
            break
    return shapes, dtype


FLUSH_S = 0.1  # the longest a record waits in the buffer while the rank lives
FLUSH_CHUNK = 64  # records signed per write: about 0.5 ms of the GIL on the 2-core machine


class Tracer:
    """Writes one rank's collective records; thread-safe (futures complete on backend threads).

    Records are buffered in memory and leave in batches (``flush``: one ``write_many``, so one
    system call, instead of one per record): every ``FLUSH_S`` from a daemon thread (so a rank
    blocked in a collective has its pending ``enter`` records out within ``FLUSH_S``, for the
    watchdog's hang report), and at exit. Not at each optimizer step: between torch's kernels the
    caches are cold, and signing a record there costs several times what it costs in a batch of
    a few steps' records (``benchmarks/harness_calls.py``: 35 against 7 us). Their order is kept:
    the buffer takes them in the order they happen, and batches leave one at a time, oldest first."""

    kind = "python"
    why_python = ""

    def __init__(self, writer: rundir.RecordWriter, attempt: int, step: Callable[[], int]):
        self._w = writer
        self._attempt = attempt
        self._step = step
        self._lock = threading.Lock()
        self._seqs = itertools.count(1)
        self._pending: dict[int, tuple[int, Any]] = {}  # id(Work) -> (seq, Work) until it completes
        self._main = threading.main_thread().ident
        self.plain_wait = dist.Work.wait  # torch's own, before install() wraps it
        # Called around issuing an operator and around Work.wait (the --profile "sync" phase).
        self.listeners: list[tuple[Callable[[], None], Callable[[], None]]] = []
        self._buf: list[dict[str, Any]] = []
        self._buf_lock = threading.Lock()  # taking a record into the buffer
        self._flush_lock = threading.Lock()  # one batch leaves at a time, in order
        self._flusher: threading.Thread | None = None
        self._pid = os.getpid()
        if hasattr(os, "register_at_fork"):  # a forked child (a DataLoader worker) starts empty
            me = weakref.ref(self)

            def after_fork() -> None:
                t = me()
                if t is not None:
                    t._after_fork()

            os.register_at_fork(after_in_child=after_fork)

    # -- records ---------------------------------------------------------------------------
    def _put(self, rec: dict[str, Any]) -> None:
        """Into the buffer: ``rec`` has its attempt and time already."""
        with self._buf_lock:
            self._buf.append(rec)
        if self._flusher is None:
            self._start_flusher()

    def flush(self) -> None:
        """Send what the buffer holds, a write per ``FLUSH_CHUNK`` records: each write lets go of
        the GIL, so the training thread waits at most one chunk's signing for it (a fast GPU job
        issues a few hundred collectives in ``FLUSH_S``)."""
        with self._flush_lock:
            with self._buf_lock:
                batch, self._buf = self._buf, []
            self._send(batch)

    def _send(self, batch: list[dict[str, Any]]) -> None:
        """Under ``_flush_lock``: ``batch`` in order, ``FLUSH_CHUNK`` records per write."""
        for i in range(0, len(batch), FLUSH_CHUNK):
            self._w.write_many(batch[i:i + FLUSH_CHUNK])

    def _start_flusher(self) -> None:
        with self._buf_lock:
            if self._flusher is not None:
                return
            self._flusher = threading.Thread(target=self._flush_every, args=(weakref.ref(self),),
                                             name="trainwreck-trace", daemon=True)
        self._flusher.start()

    @staticmethod
    def _flush_every(ref: weakref.ref) -> None:
        """The flusher thread's loop (holds the tracer weakly: a test's tracer can go)."""
        pid = os.getpid()
        while True:
            time.sleep(FLUSH_S)
            tracer = ref()
            if tracer is None or tracer._pid != pid or tracer._flusher is not threading.current_thread():
                return
            try:
                tracer.flush()
            except Exception:  # a closed writer at interpreter exit: nothing left to send to
                return
            del tracer

    def _after_fork(self) -> None:
        """In a forked child: the parent's buffered records are the parent's to send, its locks may
        have been held by a thread that does not exist here, and the flusher thread is gone."""
        self._buf = []
        self._buf_lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._flusher = None
        self._pid = os.getpid()

    def issue(self, op: str, args: tuple, kwargs: dict, async_op: bool | None, name: str = "",
              data_at: tuple[int, ...] | None = None) -> int:
        """``data_at``: the positions of the operator's tensor arguments, from its schema (None: look
        at every argument). The others are process groups, ops and options as TorchScript objects,
        and an ``isinstance`` of one of those looks for a ``__class__`` attribute through its
        ``__getattr__``: about a microsecond each, several per collective."""
        self.sweep()
        seq = next(self._seqs)  # itertools.count: atomic under the GIL, no lock needed
        on_main = threading.get_ident() == self._main
        site, api, by = _caller(sys._getframe(1).f_back)  # the kernel's caller
        if site is None and not on_main:  # an autograd device thread: the script is on the main thread
            main = sys._current_frames().get(self._main) if self._main is not None else None
            site = user_site(main) if main is not None else None
        if kwargs or data_at is None:
            shapes, dtype = _describe((*args, *kwargs.values()) if kwargs else args)
        else:
            shapes, dtype = _describe([args[i] for i in data_at if i < len(args)])
        try:
            nbytes = _bytes(args[1:2] if name in _OUTPUT_FIRST else args[:1])  # the input data on this rank
        except Exception:  # a fake or meta tensor: its size is not data moved
            nbytes = None
        rec = {"a": self._attempt, "seq": seq, "op": op, "ph": "enter", "site": site, "api": api, "by": by,
               "shapes": shapes, "dtype": dtype, "bytes": nbytes, "step": self._step(), "main": on_main}
        if async_op is not None:
            rec["async"] = async_op
        rec["t"] = time.time()
        self._put(rec)
        return seq

    def on_step(self, step: int) -> None:
        """At each optimizer step (``step`` is the new count; this kernel asks ``self._step``)."""
        self.sweep()

    def track(self, seq: int, work) -> None:
        """Record ``seq``'s completion when ``work`` completes."""
        if work is None:
            self._done(seq)
            return
        try:
            work = dist.Work.unbox(work)
        except Exception:  # already a Python Work, or a backend that returns none
            pass
        # No callback on the work's future: it runs on the backend's thread, which would then wait
        # for the GIL before the work counts as complete, and every collective would pay two thread
        # hand-offs (measured: ~0.4 ms per all_reduce on this machine). The id is safe as a key:
        # the work stays in _pending until it is seen complete.
        with self._lock:
            self._pending[id(work)] = (seq, work)

    def finished(self, work, error: BaseException | None = None) -> None:
        self._finish(id(work), error, work)

    def _finish(self, key: int, error: BaseException | None = None, work=None) -> None:
        with self._lock:
            entry = self._pending.get(key)
            if entry is None or (work is not None and entry[1] is not work):
                return
            del self._pending[key]
        self._done(entry[0], error)

    def _done(self, seq: int, error: BaseException | None = None) -> None:
        self._put(self._end(seq, time.time(), error_text(error) if error is not None else ""))

    def _end(self, seq: int, t: float, err: str) -> dict[str, Any]:
        """The ``exit`` record of ``seq``, or its ``error`` record when ``err`` says why."""
        rec: dict[str, Any] = {"a": self._attempt, "seq": seq, "ph": "error" if err else "exit"}
        if err:
            rec["err"] = err
        rec["t"] = t
        return rec

    def settle(self, grace_s: float = 1.0) -> None:
        """At the rank's exit: a work whose future has completed may not say so for a few more
        microseconds (gloo marks the future first), so look again for a moment before leaving
        anything pending; then send what is buffered."""
        deadline = time.monotonic() + grace_s
        while True:
            self.sweep()
            with self._lock:
                if not self._pending:
                    break
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        self.flush()

    def sweep(self) -> None:
        """Record the completion of works nobody waited on from Python (DDP's, the functional
        collectives'). A completed work's own ``wait`` returns at once, or raises its error: that
        tells success from failure without the deprecated ``is_success``/``exception``."""
        if not self._pending:  # read without the lock: a work added meanwhile is seen at the next look
            return
        with self._lock:
            entries = list(self._pending.values())
        for _seq, work in entries:
            try:
                if not work.is_completed():
                    continue
            except Exception:
                continue
            try:
                self.plain_wait(work)
            except Exception as e:
                self.finished(work, e)
            else:
                self.finished(work)

    # -- sync timing -------------------------------------------------------------------------
    def enter_sync(self) -> None:
        for enter, _ in self.listeners:
            enter()

    def exit_sync(self) -> None:
        for _, leave in self.listeners:
            leave()


def error_text(error: BaseException) -> str:
    """An ``error`` record's ``err``."""
    return f"{type(error).__name__}: {str(error)[-300:]}"


def data_positions(opov) -> tuple[int, ...]:
    """The positions of an operator's tensor arguments (``Tensor``, ``Tensor?``, ``Tensor[]``,
    ``Tensor[][]``), from its schema."""
    return tuple(i for i, a in enumerate(opov._schema.arguments) if "Tensor" in str(a.type))


def _kernel(tracer: Tracer, name: str, opov):
    op = OPS[name]
    schema_args = [a.name for a in opov._schema.arguments]
    async_at = schema_args.index("async_op") if "async_op" in schema_args else None
    data_at = data_positions(opov)
    # OpOverload.redispatch is this call behind one more Python frame: every collective of the job
    # comes through here (DDP's bucket all-reduces included), so the frame is skipped.
    handle = getattr(opov, "_handle", None)
    redispatch = getattr(handle, "redispatch_boxed", None) or opov.redispatch
    meta, after = torch._C.DispatchKey.Meta, _AFTER_BACKEND_SELECT

    def kernel(keyset, *args, **kwargs):
        if keyset.has(meta):  # shape propagation, not a collective
            return redispatch(keyset & after, *args, **kwargs)
        async_op = None
        if async_at is not None:
            async_op = bool(kwargs["async_op"] if "async_op" in kwargs
                            else args[async_at] if len(args) > async_at else True)
        seq = tracer.issue(op, args, kwargs, async_op, name, data_at)
        timed = bool(tracer.listeners)  # --profile's sync phase; nothing to call otherwise
        if timed:
            tracer.enter_sync()
        try:
            out = redispatch(keyset & after, *args, **kwargs)
        except BaseException as e:
            tracer._done(seq, e)
            raise
        finally:
            if timed:
                tracer.exit_sync()
        tracer.track(seq, out[-1] if isinstance(out, tuple) else out)
        return out

    return kernel


def install(writer: rundir.RecordWriter, attempt: int, step: Callable[[], int], native: bool = True) -> Tracer:
    """The C++ kernel (``harness.native_trace``) where a build for this torch exists and ``native``
    (``--profile`` times each call from Python, so it takes this module's kernel), else the Python
    kernel here. ``tracer.kind`` says which; ``tracer.why_python`` why not the C++ one."""
    global _lib
    tracer: Tracer | None = None
    why = "--profile times each collective from Python"
    if native:
        from harness import native_build

        mod, why = native_build.load()
        if mod is not None:
            from harness.native_trace import NativeTracer

            try:
                tracer = NativeTracer(mod, writer, attempt, step)
                tracer.install()
            except Exception as e:  # never let the trace keep the script from running
                tracer, why = None, f"the C++ kernel did not install: {e!r}"
    if tracer is None:
        tracer = Tracer(writer, attempt, step)
        tracer.why_python = why
        _lib = torch.library.Library("c10d", "IMPL")
        for name in OPS:
            packet = getattr(torch.ops.c10d, name, None)
            if packet is None:  # an operator this torch does not have
                continue
            _lib.impl(name, _kernel(tracer, name, packet.default), "BackendSelect", with_keyset=True)
    atexit.register(tracer.flush)  # a script that leaves by sys.exit in a thread, or after settle()

    # Waiting for a work: the end of a collective for works without a future, and "sync" time.
    orig_wait = dist.Work.wait

    def wait(self, *args, **kwargs):
        tracer.enter_sync()
        try:
            out = orig_wait(self, *args, **kwargs)
        except BaseException as e:
            tracer.finished(self, e)
            raise
        finally:
            tracer.exit_sync()
        tracer.finished(self)
        return out

    dist.Work.wait = wait  # type: ignore[method-assign]  # patched in place in the rank: how the harness observes it
    _after_wait_tensor(tracer)
    return tracer


def _after_wait_tensor(tracer: Tracer) -> None:
    """The functional collectives (DTensor) wait in C++ (``_c10d_functional::wait_tensor``), never
    through a Python ``Work.wait``: look at the open works once such a wait returns. Timed as sync."""
    global _wait_lib
    packet = getattr(torch.ops._c10d_functional, "wait_tensor", None)
    if packet is None:
        return
    opov = packet.default

    def kernel(keyset, *args, **kwargs):
        tracer.enter_sync()
        try:
            return opov.redispatch(keyset & _AFTER_BACKEND_SELECT, *args, **kwargs)
        finally:
            tracer.exit_sync()
            tracer.sweep()

    _wait_lib = torch.library.Library("_c10d_functional", "IMPL")
    _wait_lib.impl("wait_tensor", kernel, "BackendSelect", with_keyset=True)
