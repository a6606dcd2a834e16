"""Per-rank instrumentation, installed by the bootstrap before the user's script runs.

Nothing here needs the script's cooperation: a global optimizer step hook gives the heartbeat,
step times, learning rates and memory; wrappers around ``torch.distributed``'s Python entry
points give the collective trace; a wrapper around ``init_process_group`` supplies a short
default timeout; the optimizers seen by the hook give the final parameters at exit.
"""

from __future__ import annotations

import datetime
import functools
import gc
import inspect
import io
import json
import os
import signal
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

from harness import rundir, saves

# The outermost Python entry points of torch.distributed collectives. Nested calls (all_gather_object
# calls all_gather) are recorded once, at the outermost level.
COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
    "all_to_all_single", "barrier", "monitored_barrier", "broadcast", "broadcast_object_list",
    "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather", "gather_object", "scatter",
    "scatter_object_list", "send", "recv", "isend", "irecv", "batch_isend_irecv",
)
_HERE = os.path.dirname(os.path.abspath(__file__))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))

_recorder: Recorder | None = None


def current() -> Recorder | None:
    """The rank's recorder when running under the harness, else None."""
    return _recorder


def user_site(skip: int = 2) -> str | None:
    """``file:line`` of the innermost frame outside torch, the harness and the stdlib."""
    f = sys._getframe(skip)
    while f is not None:
        fn = f.f_code.co_filename
        if not (fn.startswith(_TORCH) or fn.startswith(_HERE) or fn.startswith("<")
                or "/lib/python3" in fn and "site-packages" not in fn):
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return None


class Recorder:
    def __init__(self, run_dir: Path, rank: int, key: str, attempt: int):
        self.run_dir = run_dir
        self.rank = rank
        self.key = key
        self.attempt = attempt
        self.dir = rundir.rank_dir(run_dir, rank)
        self.events = rundir.RecordWriter(self.dir / rundir.EVENTS, key)
        self.collectives = rundir.RecordWriter(self.dir / rundir.COLLECTIVES, key)
        self._samples: rundir.RecordWriter | None = None
        self._samples_pid = -1
        self.step = 0
        # Per optimizer seen stepping: a weak ref to it, strong refs to its parameters (a script's
        # optimizer is often a local of main() and gone by exit; its parameters must not be), and
        # the step at which it last stepped.
        self._opts: dict[int, tuple[weakref.ref, list[torch.Tensor], int]] = {}
        self._names: dict[int, str] = {}  # id(param) -> name, found while the model is alive
        self._last_t = time.time()
        self._proc = psutil.Process()
        self._seq = 0
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._in_scaler_step = False
        self._scaler_stepped = False
        # Parameter fingerprints per step (only when asked: each costs a device sync). They let the
        # grader find which earlier step a resumed attempt restarted from, without the script.
        self.fingerprints = os.environ.pop("TRAINWRECK_FINGERPRINT", "0") == "1"
        self._fp0_done = False

    def before_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.fingerprints and not self._fp0_done:
            self._fp0_done = True
            self.event("fingerprint0", fp=fingerprint(optimizer))

    # -- records ---------------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> None:
        self.events.write({"kind": kind, "attempt": self.attempt, "t": time.time(), **fields})

    def sample(self, dataset: str, index: int) -> None:
        # DataLoader workers are forked: each process needs its own file handle.
        if self._samples is None or self._samples_pid != os.getpid():
            self._samples = rundir.RecordWriter(self.dir / rundir.SAMPLES, self.key)
            self._samples_pid = os.getpid()
        self._samples.write({"a": self.attempt, "ds": dataset, "i": int(index), "s": self.step})

    # -- optimizer steps -------------------------------------------------------------------
    def on_step(self, optimizer: torch.optim.Optimizer, skipped: bool = False) -> None:
        if self._in_scaler_step:
            self._scaler_stepped = True
        self.step += 1
        if optimizer is not None:
            entry = self._opts.get(id(optimizer))
            if entry is None or entry[0]() is not optimizer:
                params = [p for g in optimizer.param_groups for p in g["params"]]
                entry = (weakref.ref(optimizer), params, self.step)
                self._names.update(zip(map(id, params), _param_names(params)))
            self._opts[id(optimizer)] = (entry[0], entry[1], self.step)
        now = time.time()
        rec: dict[str, Any] = {
            "step": self.step,
            "dt": now - self._last_t,
            "rss_mb": self._proc.memory_info().rss / 2**20,
        }
        self._last_t = now
        if optimizer is not None:
            rec["lr"] = [float(g.get("lr", 0.0)) for g in optimizer.param_groups]
        if skipped:
            rec["skipped"] = True
        if self.fingerprints and optimizer is not None:
            rec["fp"] = fingerprint(optimizer)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rec["cuda_alloc_mb"] = torch.cuda.memory_allocated() / 2**20
            rec["cuda_max_alloc_mb"] = torch.cuda.max_memory_allocated() / 2**20
        self.event("step", **rec)

    # -- collectives -----------------------------------------------------------------------
    def wrap_collective(self, name: str, fn):
        @functools.wraps(fn)
        def traced(*args, **kwargs):
            depth = getattr(self._tls, "depth", 0)
            if depth:
                return fn(*args, **kwargs)
            with self._lock:
                self._seq += 1
                seq = self._seq
            shapes, dtype = _describe(args, kwargs)
            self.collectives.write({
                "a": self.attempt, "seq": seq, "op": name, "ph": "enter", "site": user_site(),
                "shapes": shapes, "dtype": dtype, "step": self.step, "t": time.time(),
            })
            self._tls.depth = 1
            try:
                out = fn(*args, **kwargs)
            except BaseException as e:  # a timeout or a peer that died: where it happened matters
                self.collectives.write({"a": self.attempt, "seq": seq, "ph": "error", "t": time.time(),
                                        "err": f"{type(e).__name__}: {str(e)[-300:]}"})
                raise
            else:
                self.collectives.write({"a": self.attempt, "seq": seq, "ph": "exit", "t": time.time()})
                return out
            finally:
                self._tls.depth = 0
        traced.__trainwreck_wrapped__ = True
        return traced

    # -- exit ------------------------------------------------------------------------------
    def save_final_params(self) -> dict[str, Any]:
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
        if not params:
            return {"n_tensors": 0, "numel": 0}
        names = [self._names.get(id(p), f"param.{i}") for i, p in enumerate(params)]
        if len(set(names)) != len(names):
            names = [f"param.{i}" for i in range(len(params))]
        state = {names[i]: p.detach().to("cpu", copy=True) for i, p in enumerate(params)}
        path = self.dir / rundir.FINAL_PARAMS
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)
        return {
            "n_tensors": len(state),
            "numel": int(sum(t.numel() for t in state.values())),
            "params_sha256": rundir.sha256_file(path),
        }


def fingerprint(optimizer: torch.optim.Optimizer) -> float:
    """A cheap summary of the parameters: the first elements of each, summed in float64. Any real
    update changes it; a checkpoint round trip (bit-exact) does not."""
    with torch.no_grad():
        vals = [p.detach().reshape(-1)[:8].double().sum()
                for g in optimizer.param_groups for p in g["params"] if p.numel()]
        return float(torch.stack(vals).sum().cpu()) if vals else 0.0


def _describe(args, kwargs) -> tuple[list, str | None]:
    shapes, dtype = [], None
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            shapes.append(list(a.shape))
            dtype = dtype or str(a.dtype).replace("torch.", "")
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            shapes.append([list(t.shape) for t in a[:4]])
            dtype = dtype or str(a[0].dtype).replace("torch.", "")
    return shapes, dtype


def _param_names(params: list[torch.Tensor]) -> list[str]:
    """Names from the largest live nn.Module owning these parameters, wrappers stripped, so a
    DDP-wrapped and an unwrapped model compare by the same names. Falls back to positions."""
    want = {id(p) for p in params}
    best: dict[int, str] = {}
    with warnings.catch_warnings():  # isinstance() on deprecated torch proxies warns
        warnings.simplefilter("ignore")
        modules = [o for o in gc.get_objects() if isinstance(o, torch.nn.Module)]
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


def install(run_dir: Path, rank: int, key: str, attempt: int, pg_timeout_s: float) -> Recorder:
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

    scaler_cls.step = scaler_step

    import torch.distributed.distributed_c10d as c10d

    for name in COLLECTIVES:
        for mod in (dist, c10d):
            fn = getattr(mod, name, None)
            if fn is not None and not getattr(fn, "__trainwreck_wrapped__", False):
                setattr(mod, name, rec.wrap_collective(name, fn))

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
        if not given:
            call.arguments["timeout"] = datetime.timedelta(seconds=pg_timeout_s)
        out = orig_init(*call.args, **call.kwargs)
        rec.event("pg_init", backend=str(dist.get_backend()), world_size=dist.get_world_size(),
                  timeout_s=call.arguments["timeout"].total_seconds(), timeout_from_script=given)
        return out

    dist.init_process_group = init_process_group
    c10d.init_process_group = init_process_group
    _install_faults(rec, json.loads(os.environ.pop("TRAINWRECK_FAULTS", "[]") or "[]"))
    # After the faults: a save the harness tears on purpose still shows its begin and no end.
    saves.install(run_dir, rank, key, attempt, lambda: rec.step, fingerprints=rec.fingerprints)
    return rec


def _install_faults(rec: Recorder, faults: list[dict[str, Any]]) -> None:
    """Kill this rank at a chosen point, so restarts and resumes are graded on a real crash."""
    mine = [f for f in faults if f["rank"] == rec.rank and f["attempt"] == rec.attempt]
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
                os.kill(os.getpid(), signal.SIGKILL)

        rec.on_step = on_step
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
            out = open(f, "wb") if isinstance(f, (str, os.PathLike)) else f
            out.write(data[: len(data) // 2])  # half the bytes reach the disk, then the process dies
            out.flush()
            os.fsync(out.fileno())
            rec.event("fault", what="sigkill_during_save", step=rec.step, path=path)
            os.kill(os.getpid(), signal.SIGKILL)

        torch.save = torn_save


def describe_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-4000:]
