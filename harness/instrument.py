"""Per-rank instrumentation, installed by the bootstrap before the user's script runs.

Nothing here needs the script's cooperation: a global optimizer step hook gives the heartbeat,
step times, learning rates and memory; a wrapper around ``backward`` gives each step's loss;
``harness.collectives`` traces every collective at the dispatcher; a wrapper around
``init_process_group`` records the process group's timeout (and supplies one only when the launch
asked for it with ``--pg-timeout``); the optimizers seen by the hook give the final parameters at
exit.
"""

from __future__ import annotations

import datetime
import functools
import gc
import inspect
import io
import json
import math
import os
import runpy
import sys
import threading
import time
import traceback
import warnings
import weakref
from pathlib import Path
from typing import Any

import psutil
import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from harness import channel, collectives, faults, memstats, rawwrites, rundir, saves, work

_recorder: Recorder | None = None

# Every process group the script made, kept until the bootstrap leaves (harness.bootstrap.leave).
# A gloo group whose last reference goes in DDP's Reducer destructor, when the script's DDP model
# is freed, joins its worker threads holding the GIL while a worker is freeing a finished work's
# tensors, which takes the GIL: the rank hangs after its last line (torch 2.13; seen in about one
# gloo job in ten). Kept here, no group is destroyed before the process leaves.
_kept_groups: list = []
_kept_seen: set[int] = set()


def keep_process_groups() -> None:
    """Hold a reference to every process group torch knows of now. Runs at every optimizer step, so
    the usual case is one lookup: the registry is a dict, in the order groups were made, so a group
    not kept yet is followed only by groups newer still, and there is none when the newest is kept."""
    try:
        pg_map = _c10d()._world.pg_map
        if not pg_map or id(next(reversed(pg_map))) in _kept_seen:
            return
        groups = list(pg_map)
    except Exception:  # a torch without the registry: nothing kept, nothing broken
        return
    for g in groups:
        if id(g) not in _kept_seen:
            _kept_seen.add(id(g))
            _kept_groups.append(g)


@functools.cache
def _c10d():
    from torch.distributed import distributed_c10d

    return distributed_c10d


def kept_process_groups() -> int:
    return len(_kept_groups)


def current() -> Recorder | None:
    """The rank's recorder when running under the harness, else None."""
    return _recorder


class Recorder:
    def __init__(self, run_dir: Path, rank: int, key: str, attempt: int):
        self.run_dir = run_dir
        self.rank = rank
        self.key = key
        self.attempt = attempt
        self.dir = rundir.rank_dir(run_dir, rank)
        self.events = channel.open_writer(self.dir / rundir.EVENTS, key)
        self.collectives = channel.open_writer(self.dir / rundir.COLLECTIVES, key)
        self._samples: rundir.RecordWriter | None = None
        self._samples_pid = -1
        self.step = 0
        # Per optimizer seen stepping: a weak ref to it, strong refs to its parameters (a script's
        # optimizer is often a local of main() and gone by exit; its parameters must not be), and
        # the step at which it last stepped.
        self._opts: dict[int, tuple[weakref.ref, list[torch.Tensor], int]] = {}
        self._names: dict[int, str] = {}  # id(param) -> name, found while the model is alive
        self._last_t = time.time()
        self._rss = _RssReader()
        self._seq = 0
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._in_scaler_step = False
        self._scaler_stepped = False
        self.tracer: collectives.Tracer | None = None
        # The loss backpropagated since the last optimizer step: sum of scalar roots (unscaled
        # when a GradScaler scaled them), how many backward calls, and the last scaled output seen.
        self._loss: float | None = None
        self._n_backward = 0
        self._loss_scale: float | None = None
        self._scaled: tuple[weakref.ref, Any] | None = None
        # Parameter fingerprints per step (only when asked: each costs a device sync). They let the
        # grader find which earlier step a resumed attempt restarted from, without the script.
        self.fingerprints = os.environ.pop("TRAINWRECK_FINGERPRINT", "0") == "1"
        self._fp0_done = False
        # With fingerprints: the parameters as the step began (pre-hook), so a change between the
        # end of one step and the start of the next shows; which parameter set each optimizer
        # steps (``opt`` in the record: its ordinal, first seen first); and per set the optimizer
        # and parameters that stepped last, fingerprinted again at exit (``fp_exit``).
        self._fp_pre: float | None = None
        self._fp_sets: dict[tuple[int, ...], int] = {}
        self._fp_ord: dict[int, int] = {}  # id(optimizer) -> ordinal of its parameter set
        self._fp_last: dict[int, tuple[weakref.ref, list[torch.Tensor]]] = {}
        # Fields other modules add to each step record and to the exit record (harness.work, memstats)
        self.step_fields: list[Any] = []
        self.exit_fields: list[Any] = []

    def before_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.fingerprints:
            fp = fingerprint(optimizer)
            if not self._fp0_done:
                self._fp0_done = True
                self.event("fingerprint0", fp=fp)
            self._fp_pre = fp

    # -- records ---------------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> None:
        self.events.write({"kind": kind, "attempt": self.attempt, "t": time.time(), **fields})

    def sample(self, dataset: str, index: int | list[int]) -> None:
        """One ledger record: one item, or the items of one batch fetch (``__getitems__``) as a list,
        read at one moment: a record per batch instead of per item (memory-leak reads about 100k
        items per rank, and each record is signed; through the sandbox's channel, by the parent)."""
        # DataLoader workers are forked: each process needs its own file handle.
        if self._samples is None or self._samples_pid != os.getpid():
            self._samples = channel.open_writer(self.dir / rundir.SAMPLES, self.key)
            self._samples_pid = os.getpid()
        i = int(index) if not isinstance(index, list) else [int(x) for x in index]
        self._samples.write({"a": self.attempt, "ds": dataset, "i": i, "s": self.step})

    # -- optimizer steps -------------------------------------------------------------------
    def on_step(self, optimizer: torch.optim.Optimizer, skipped: bool = False) -> None:
        keep_process_groups()  # groups made after init (new_group, a DeviceMesh's)
        if self._in_scaler_step:
            self._scaler_stepped = True
        self.step += 1
        if optimizer is not None:
            entry = self._opts.get(id(optimizer))
            if entry is None or entry[0]() is not optimizer:
                params = [p for g in optimizer.param_groups for p in g["params"]]
                entry = (weakref.ref(optimizer), params, self.step)
                self._names.update(zip(map(id, params), _param_names(params)))
                self._fp_ord[id(optimizer)] = self._fp_sets.setdefault(tuple(map(id, params)), len(self._fp_sets))
            self._opts[id(optimizer)] = (entry[0], entry[1], self.step)
            if self.fingerprints:
                self._fp_last[self._fp_ord[id(optimizer)]] = (entry[0], entry[1])
        now = time.time()
        rec: dict[str, Any] = {
            "step": self.step,
            "dt": now - self._last_t,
            "rss_mb": self._rss.mb(),
        }
        if optimizer is not None:
            rec["lr"] = [float(g.get("lr", 0.0)) for g in optimizer.param_groups]
        if skipped:
            rec["skipped"] = True
        if self._n_backward:
            loss = self._loss
            # Standard JSON has no NaN or Infinity: a diverged loss is written as a string.
            rec["loss"] = loss if loss is None or math.isfinite(loss) else str(loss)
            rec["n_backward"] = self._n_backward
            if self._loss_scale is not None:
                rec["loss_scale"] = self._loss_scale
        self._loss, self._n_backward, self._loss_scale = None, 0, None
        if self.fingerprints and optimizer is not None:
            rec["fp"] = fingerprint(optimizer)
            if self._fp_pre is not None:
                rec["fp_pre"] = self._fp_pre
            if self._fp_ord.get(id(optimizer)):
                rec["opt"] = self._fp_ord[id(optimizer)]
        self._fp_pre = None
        if torch.cuda.is_initialized():  # never true without a GPU, and cheaper than is_available()
            rec["cuda_alloc_mb"], rec["cuda_max_alloc_mb"] = _cuda_allocated_mb()
        for more in self.step_fields:
            try:
                rec.update(more())
            except Exception as e:  # never let a count break the script's optimizer step
                rec.setdefault("field_errors", []).append(repr(e)[:200])
        # The harness's own work at this step (fingerprints, counts) is no step's time.
        self._last_t = time.time()
        self.event("step", **rec)
        if self.tracer is not None:  # completions seen now; the records leave with the trace's next batch
            self.tracer.on_step(self.step)

    # -- loss ------------------------------------------------------------------------------
    def on_backward(self, roots) -> None:
        """A backward pass from ``roots``: add the scalar ones to this step's loss. ``float()`` of a
        tensor on an accelerator waits for the device, once per backward call."""
        total, seen = 0.0, False
        for t in roots:
            if not isinstance(t, torch.Tensor) or t.numel() != 1:
                continue
            t = _replicated_local(t)
            if t is None:  # a sharded or partial DTensor: its value would take a collective
                continue
            try:
                v = float(t.detach())
            except Exception:  # a fake or meta tensor: no value to record
                continue
            scaled = self._scaled
            if scaled is not None and scaled[0]() is t:
                scale = float(scaled[1].get_scale())
                if scale:
                    v /= scale
                    self._loss_scale = scale
            total += v
            seen = True
        if seen:
            self._loss = (self._loss or 0.0) + total
            self._n_backward += 1

    # -- exit ------------------------------------------------------------------------------
    def save_final_params(self) -> dict[str, Any]:
        """Save the parameters this rank holds. A DTensor parameter (FSDP2, tensor parallel) is saved
        as its local shard, and its global shape and the shard's offset go into the exit record
        (``shards``), so the full tensors can be put back together from every rank's file
        (``harness.finalparams``) without a collective at exit, where a peer may be gone."""
        # The optimizers still alive, else those that stepped last: an optimizer replaced on
        # resume, or a model rebuilt, must not contribute stale parameters.
        entries = list(self._opts.values())
        alive = [e for e in entries if e[0]() is not None]
        last = max((e[2] for e in entries), default=0)
        chosen = alive or [e for e in entries if e[2] == last]
        params, seen = [], set()
        for _, plist, _ in chosen:
            for p in plist:
                if id(p) not in seen:
                    seen.add(id(p))
                    params.append(p)
        extra: dict[str, Any] = {}
        for more in self.exit_fields:
            try:
                extra.update(more())
            except Exception as e:
                extra.setdefault("field_errors", []).append(repr(e)[:200])
        if self.fingerprints and self._fp_last:
            # the parameters each optimizer stepped last, as they are now: the grader checks that
            # nothing changed them after the last observed step
            extra["fp_exit"] = [self._exit_fingerprint(*self._fp_last[o]) for o in sorted(self._fp_last)]
        if not params:
            return {"n_tensors": 0, "numel": 0, "local_numel": 0, **extra}
        names = [self._names.get(id(p), f"param.{i}") for i, p in enumerate(params)]
        if len(set(names)) != len(names):
            names = [f"param.{i}" for i in range(len(params))]
        state, shards = {}, {}
        for name, p in zip(names, params):
            local, shard = _local_part(p.detach())
            state[name] = local.to("cpu", copy=True)
            if shard is not None:
                shards[name] = shard
        path = self.dir / rundir.FINAL_PARAMS
        rundir.save_params(state, path)
        out = {
            "n_tensors": len(state),
            "numel": int(sum(p.numel() for p in params)),  # the model's size: global for shards
            "local_numel": int(sum(t.numel() for t in state.values())),
            "params_sha256": rundir.sha256_file(path),
            **extra,
        }
        if shards:
            out["shards"] = shards
        return out

    @staticmethod
    def _exit_fingerprint(ref: weakref.ref, params: list[torch.Tensor]) -> float | None:
        """None for sharded (DTensor) parameters: their fingerprint takes a collective, and at exit
        a peer may be gone."""
        if any(_local_part(p)[1] is not None for p in params):
            return None
        opt = ref()
        try:
            return fingerprint(opt) if opt is not None else fingerprint_params(params)
        except Exception:
            return None


class _RssReader:
    """This process's resident set size, read at every optimizer step. psutil opens, reads and
    closes ``/proc/<pid>/statm`` per call; here the file stays open and one ``pread`` reads it (the
    same numbers: resident pages times the page size). Where there is no ``/proc``, or it cannot be
    read, psutil's reading."""

    def __init__(self, path: str = "/proc/self/statm"):
        self._path = path
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._fd: int | None = None
        self._pid = -1
        self._proc: psutil.Process | None = None

    def _open(self) -> int | None:
        """``/proc/self`` names the process that opens it: a forked child opens its own."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
        self._pid = os.getpid()
        try:
            self._fd = os.open(self._path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            self._fd = None
        return self._fd

    def mb(self) -> float:
        fd = self._fd if self._pid == os.getpid() else self._open()
        if fd is not None and self._proc is None:
            try:
                return int(os.pread(fd, 256, 0).split()[1]) * self._page / 2**20
            except (OSError, ValueError, IndexError):  # unreadable or not statm: psutil from now on
                pass
        if self._proc is None or self._proc.pid != os.getpid():
            self._proc = psutil.Process()
        return self._proc.memory_info().rss / 2**20


def _cuda_allocated_mb() -> tuple[float, float]:
    """The caching allocator's allocated bytes now and at their peak, in MiB, on the current device:
    ``memory_allocated()`` and ``max_memory_allocated()``, read from one nested stats dict (each of
    those two builds, flattens and sorts every allocator statistic, at every optimizer step)."""
    try:
        b = torch.cuda.memory_stats_as_nested_dict()["allocated_bytes"]["all"]
        return b["current"] / 2**20, b["peak"] / 2**20
    except (KeyError, TypeError, AttributeError):  # a torch whose stats are shaped otherwise
        return torch.cuda.memory_allocated() / 2**20, torch.cuda.max_memory_allocated() / 2**20


def _replicated_local(t: torch.Tensor) -> torch.Tensor | None:
    """``t``, or for a DTensor its local tensor when that holds the whole value (replicated)."""
    if "torch.distributed.tensor" not in sys.modules:
        return t
    from torch.distributed.tensor import DTensor

    if not isinstance(t, DTensor):
        return t
    return t.to_local() if all(p.is_replicate() for p in t.placements) else None


def _local_part(t: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any] | None]:
    """A plain tensor as it is; a DTensor as its local shard and where that sits in the whole."""
    if "torch.distributed.tensor" not in sys.modules:  # no DTensor can exist yet
        return t, None
    from torch.distributed.tensor import DTensor

    if not isinstance(t, DTensor):
        return t, None
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local = t.to_local()
    placements = [str(p) for p in t.placements]
    try:
        _, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    except Exception:  # a placement this torch cannot place: the shard is kept, marked unplaceable
        offset = None
    # Only plain Shard/Replicate blocks can be put back by copying: say so for anything else.
    placeable = offset is not None and all(
        p.startswith(("Shard(", "Replicate(")) or p in ("R", "Replicate()") or p.startswith("S(")
        for p in placements)
    return local, {"shape": list(t.shape), "offset": list(offset) if offset is not None else None,
                   "placements": placements, "placeable": placeable}


def fingerprint(optimizer: torch.optim.Optimizer) -> float:
    """A cheap summary of the parameters: the first elements of each, summed in float64. Any real
    update changes it; a checkpoint round trip (bit-exact) does not."""
    return fingerprint_params([p for g in optimizer.param_groups for p in g["params"]])


def fingerprint_params(params: list[torch.Tensor]) -> float:
    with torch.no_grad():
        vals = [p.detach().reshape(-1)[:8].double().sum() for p in params if p.numel()]
        return float(torch.stack(vals).sum().cpu()) if vals else 0.0


def _param_names(params: list[torch.Tensor]) -> list[str]:
    """Names from the largest live nn.Module owning these parameters, wrappers stripped, so a
    DDP-wrapped and an unwrapped model compare by the same names. Falls back to positions."""
    want = {id(p) for p in params}
    best: dict[int, str] = {}
    with warnings.catch_warnings():  # isinstance() on deprecated torch proxies warns
        warnings.simplefilter("ignore")
        modules = [o for o in gc.get_objects() if isinstance(o, torch.nn.Module)]
    modules += memstats.frozen_modules()  # alive at the first step: gc.get_objects() no longer lists them
    for obj in modules:
        try:
            named = {id(p): n for n, p in obj.named_parameters() if id(p) in want}
        except Exception:
            continue
        if len(named) > len(best):
            best = named
    out = []
    for i, p in enumerate(params):
        name = best.get(id(p))
        if name is None:
            out.append(f"param.{i}")
            continue
        for prefix in ("module.", "_orig_mod."):
            while name.startswith(prefix):
                name = name[len(prefix):]
        out.append(name)
    if len(set(out)) != len(out):
        out = [f"param.{i}" for i in range(len(params))]
    return out


def install(run_dir: Path, rank: int, key: str, attempt: int, pg_timeout_s: float | None) -> Recorder:
    """``pg_timeout_s``: the process-group timeout to supply where the script gives none, or None
    to leave torch's default (30 minutes on gloo and NCCL)."""
    global _recorder
    rec = Recorder(run_dir, rank, key, attempt)
    _recorder = rec

    register_optimizer_step_pre_hook(lambda opt, a, k: rec.before_step(opt))
    register_optimizer_step_post_hook(lambda opt, a, k: rec.on_step(opt))

    # GradScaler.step skips optimizer.step on inf/nan gradients; that is still an iteration.
    scaler_cls = torch.amp.GradScaler
    orig_scaler_step = scaler_cls.step

    @functools.wraps(orig_scaler_step)
    def scaler_step(self, optimizer, *args, **kwargs):
        rec._in_scaler_step, rec._scaler_stepped = True, False
        try:
            return orig_scaler_step(self, optimizer, *args, **kwargs)
        finally:
            rec._in_scaler_step = False
            if not rec._scaler_stepped:
                rec.on_step(optimizer, skipped=True)

    scaler_cls.step = scaler_step  # type: ignore[method-assign]  # patched in place in the rank: how the harness observes it

    # The loss: the root of each backward pass. A GradScaler's scale() output is remembered, so
    # its backward is recorded unscaled.
    orig_scale = scaler_cls.scale

    @functools.wraps(orig_scale)
    def scale(self, outputs):
        out = orig_scale(self, outputs)
        if isinstance(out, torch.Tensor) and self.is_enabled():
            rec._scaled = (weakref.ref(out), self)
        return out

    scaler_cls.scale = scale  # type: ignore[method-assign]  # patched in place in the rank: how the harness observes it
    _install_backward(rec)
    if os.environ.pop(rundir.GRADING_EVIDENCE_ENV, "0") == "1":  # gradings only: what their checks read
        work.install(rec)  # backward passes, outermost forward calls, rows and autocast per step
        memstats.install(rec)  # live tensors and autograd graph nodes every few steps
    faults.install_overflow(rec, os.environ.pop(faults.OVERFLOW_ENV, ""))  # gradients that overflow, for grading

    rec.tracer = collectives.install(rec.collectives, attempt, lambda: rec.step,
                                     native=not os.environ.get(rundir.PROFILE_ENV))

    import torch.distributed.distributed_c10d as c10d

    orig_init = c10d.init_process_group
    init_sig = inspect.signature(orig_init)

    @functools.wraps(orig_init)
    def init_process_group(*args, **kwargs):
        # The timeout may come by keyword or by position; None means torch's default (30 min on gloo).
        try:
            call = init_sig.bind(*args, **kwargs)
        except TypeError:  # a call torch itself will reject: let it say why
            return orig_init(*args, **kwargs)
        given = call.arguments.get("timeout") is not None
        if not given and pg_timeout_s is not None:
            call.arguments["timeout"] = datetime.timedelta(seconds=pg_timeout_s)
        out = orig_init(*call.args, **call.kwargs)
        keep_process_groups()
        timeout = call.arguments.get("timeout")
        if timeout is None:  # torch's own default for this backend, as torch would apply it
            try:
                timeout = c10d._get_default_timeout(dist.get_backend())
            except Exception:
                timeout = None
        rec.event("pg_init", backend=str(dist.get_backend()), world_size=dist.get_world_size(),
                  timeout_s=timeout.total_seconds() if timeout is not None else None,
                  timeout_from_script=given,
                  timeout_by=("script" if given else "harness" if pg_timeout_s is not None else "torch"))
        return out

    dist.init_process_group = init_process_group
    c10d.init_process_group = init_process_group
    _install_faults(rec, json.loads(os.environ.pop("TRAINWRECK_FAULTS", "[]") or "[]"))
    # After the faults: a save the harness tears on purpose still shows its begin and no end.
    saves.install(run_dir, rank, key, attempt, lambda: rec.step, fingerprints=rec.fingerprints)
    return rec


def _install_backward(rec: Recorder) -> None:
    """``Tensor.backward`` calls ``torch.autograd.backward``: one record per outermost call."""
    depth = threading.local()

    def wrap(fn, roots_of):
        @functools.wraps(fn)
        def backward(*args, **kwargs):
            outer = not getattr(depth, "n", 0)
            if outer:
                try:
                    rec.on_backward(roots_of(args, kwargs))
                except Exception:  # never let the loss record break the script's backward
                    pass
            depth.n = getattr(depth, "n", 0) + 1
            try:
                return fn(*args, **kwargs)
            finally:
                depth.n -= 1
        return backward

    def tensor_roots(args, kwargs):
        return args[:1]

    def autograd_roots(args, kwargs):
        t = args[0] if args else kwargs.get("tensors")
        return [t] if isinstance(t, torch.Tensor) else list(t or [])

    torch.Tensor.backward = wrap(torch.Tensor.backward, tensor_roots)  # type: ignore[method-assign]  # patched in place in the rank: how the harness observes it
    torch.autograd.backward = wrap(torch.autograd.backward, autograd_roots)


def _install_faults(rec: Recorder, planned: list[dict[str, Any]]) -> None:
    """Mark the chosen point of this rank, where the parent kills it (``harness.injector``), so
    restarts and resumes are graded on a real crash: a ``fault`` event, then wait."""
    mine = [f for f in planned if f["rank"] == rec.rank and f["attempt"] == rec.attempt]
    if not mine:
        return
    at_step = [f["step"] for f in mine if f["when"] == "step"]
    at_save = [f["step"] for f in mine if f["when"] == "save"]
    if at_step:
        orig_on_step = rec.on_step

        def on_step(optimizer, skipped=False):
            orig_on_step(optimizer, skipped)
            if rec.step in at_step:
                rec.event("fault", what="sigkill", step=rec.step)
                _flush_trace(rec)
                faults.await_kill()

        rec.on_step = on_step  # type: ignore[method-assign]  # the recorder's step hook, chained on this instance
    if at_save:
        orig_save = torch.save

        @functools.wraps(orig_save)
        def torn_save(obj, f, *args, **kwargs):
            # A path or an open file both reach the disk; the harness's own files (final_params)
            # and in-memory buffers are not a checkpoint write.
            path = saves._path_of(f)
            if (rec.step < min(at_save) or path is None
                    or os.path.realpath(path).startswith(str(rec.dir.resolve()) + os.sep)):
                return orig_save(obj, f, *args, **kwargs)
            buf = io.BytesIO()
            orig_save(obj, buf, *args, **kwargs)
            data = buf.getvalue()
            with rawwrites.inside():  # this write is the traced save's own
                out = open(f, "wb") if isinstance(f, (str, os.PathLike)) else f
                out.write(data[: len(data) // 2])  # half the bytes reach the disk, then the rank is killed
                out.flush()
                os.fsync(out.fileno())
            rec.event("fault", what="sigkill_during_save", step=rec.step, path=path)
            _flush_trace(rec)
            faults.await_kill()

        torch.save = torn_save

        def torn(path: str) -> None:  # a DCP file or a binary file written with open(): the tear's record
            rec.event("fault", what="sigkill_during_save", step=rec.step, path=path)
            _flush_trace(rec)

        # the same for the files torch.distributed.checkpoint writes (harness.saves traces them)
        saves.arm_tear(min(at_save), lambda: rec.step, torn)


def _flush_trace(rec: Recorder) -> None:
    """Before the parent's SIGKILL: the buffered collective records go first."""
    if rec.tracer is not None:
        rec.tracer.flush()


def describe_exception(exc: BaseException) -> str:
    """The traceback as the script's author would see it under plain ``python``: the bootstrap's
    and runpy's frames that start every rank's stack are left out, so the script's frames come first."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None and _is_launch_frame(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))[-4000:]


def _is_launch_frame(filename: str) -> bool:
    return (filename.endswith(os.path.join("harness", "bootstrap.py")) or filename == runpy.__file__
            or filename.startswith("<frozen runpy"))
