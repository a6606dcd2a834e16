"""``trainwreck run --profile`` inside a rank: the per-phase step timer and a ``torch.profiler``
trace, installed by the bootstrap after ``harness.instrument`` and without the script's cooperation.

Where each phase's time comes from (main thread only, see ``harness.phases.PhaseTimer``):

- data: ``DataLoader.__iter__`` and the loader iterator's ``__next__`` (waiting for the input pipeline);
- forward: the outermost ``nn.Module`` call (global forward pre/post hooks; nested modules deepen it);
- backward: ``Tensor.backward``, ``torch.autograd.backward`` and ``torch.autograd.grad``;
- sync: issuing a collective (any API: ``harness.collectives`` sees them at the dispatcher) and
  waiting for one (``Work.wait``, the functional collectives' ``wait_tensor``); DDP waits for its
  bucket all-reduces in C++ at the end of backward, which stays in backward;
- optimizer: between the optimizer step pre-hook and the harness's step record;
- checkpoint: ``torch.save`` (whatever ``torch.save`` is at install time: other wrappers compose),
  ``shutil.copyfile`` (and the ``shutil.copy*`` built on it) and ``ArtifactStore.upload``;
- other: the rest of the step's wall time.

Nothing here runs without ``--profile``: the default path of a rank is unchanged.
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
import time
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_pre_hook

from harness import channel, rundir
from harness.instrument import Recorder
from harness.phases import PROFILE, SCHEDULE, PhaseTimer

_TRACING = ("WARMUP", "RECORD", "RECORD_AND_SAVE")


class Profiler:
    def __init__(self, rec: Recorder, schedule: dict[str, int]):
        self.rec = rec
        self.pid = os.getpid()
        self.cuda = torch.cuda.is_available()
        def sync() -> None:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()

        self.timer = PhaseTimer(before_clock=sync if self.cuda else None)
        self.out = channel.open_writer(rec.dir / PROFILE, rec.key)
        self._bg = 0.0  # seconds of torch.save on other threads since the last step
        self._bg_lock = threading.Lock()
        self._traced: list[int] = []  # harness step numbers recorded by the torch profiler
        self._done = False
        self._trace_written = False
        self.trace_file = f"trace.a{rec.attempt}.pt.trace.json"
        self.torch_prof = self._start_torch_profiler(schedule)
        self.write("profile_start", schedule=schedule, cuda_sync=self.cuda,
                   activities=[] if self.torch_prof is None else self._activities)

    def write(self, kind: str, **fields: Any) -> None:
        if os.getpid() == self.pid:  # never from a forked DataLoader worker
            self.out.write({"kind": kind, "attempt": self.rec.attempt, "t": time.time(), **fields})

    # -- torch.profiler ---------------------------------------------------------------------
    def _start_torch_profiler(self, schedule: dict[str, int]):
        acts = [torch.profiler.ProfilerActivity.CPU]
        if self.cuda:
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        self._activities = [a.name.lower() for a in acts]
        try:
            prof = torch.profiler.profile(
                activities=acts, schedule=torch.profiler.schedule(repeat=1, **schedule),
                on_trace_ready=self._export)
            prof.start()
            return prof
        except Exception as e:
            self._trace_failed(e)
            return None

    def _export(self, prof) -> None:
        path = self.rec.dir / self.trace_file
        tmp = path.with_name(path.name + ".tmp")
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, path)
        steps = [self._traced[0], self._traced[-1]] if self._traced else None
        self._trace_written = True
        sha, size = rundir.sha256_file(path), path.stat().st_size
        if channel.active():  # sandboxed: the parent stores the trace in the run dir
            try:
                channel.send_file(self.trace_file, path.read_bytes())
            except OSError as e:
                self.write("trace_error", error=f"the parent did not store the trace: {e}")
                return
            finally:
                path.unlink(missing_ok=True)
        self.write("trace", file=self.trace_file, sha256=sha, bytes=size, steps=steps)

    def _trace_failed(self, e: BaseException) -> None:
        # A script running its own torch.profiler, say: the phases go on, the trace is given up.
        self.write("trace_error", error=f"{type(e).__name__}: {str(e)[-300:]}")
        self.torch_prof = None

    # -- step boundaries --------------------------------------------------------------------
    def on_step(self) -> None:
        """After the harness's step record: close this step's window and move the profiler on."""
        if self._done:
            return
        traced, profiler_s = False, 0.0
        if self.torch_prof is not None:
            traced = self.torch_prof.current_action.name in _TRACING
            if self.torch_prof.current_action.name.startswith("RECORD"):
                self._traced.append(self.rec.step)
            t0 = time.perf_counter()
            try:
                self.torch_prof.step()
                if self._trace_written:  # the schedule is over: stop paying for its step markers
                    self.torch_prof.stop()
                    self.torch_prof = None
            except Exception as e:
                self._trace_failed(e)
            profiler_s = time.perf_counter() - t0
        self._close("phases", profiler_s, step=self.rec.step, traced=traced)

    def _close(self, kind: str, profiler_s: float, **fields: Any) -> None:
        phases = self.timer.close_window(profiler_s)
        with self._bg_lock:
            bg, self._bg = self._bg, 0.0
        self.write(kind, **fields, **phases, bg_checkpoint=round(bg, 7))

    def finish(self) -> None:
        """At the rank's exit (the script returned, raised or called sys.exit): the time after the
        last step, then stop the torch profiler, which writes the trace if it was recording."""
        if self._done or os.getpid() != self.pid:
            return
        self._done = True
        self._close("tail", 0.0)
        if self.torch_prof is not None:
            if self.torch_prof.current_action.name.startswith("RECORD"):
                self._traced.append(self.rec.step + 1)  # unfinished: the trace ends inside it
            try:
                self.torch_prof.stop()
            except Exception as e:
                self._trace_failed(e)

    def background_save(self, seconds: float) -> None:
        with self._bg_lock:
            self._bg += seconds


def _phase(timer: PhaseTimer, name: str, fn):
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        timer.enter(name)
        try:
            return fn(*args, **kwargs)
        finally:
            timer.exit(name)
    return timed


def install(rec: Recorder, schedule: dict[str, int] | None = None) -> Profiler:
    prof = Profiler(rec, schedule or SCHEDULE)
    timer = prof.timer

    # optimizer: from the pre-hook to the harness's step record. Wrapping rec.on_step (not a post
    # hook of our own) keeps the windows on the harness's step count, GradScaler-skipped steps too.
    register_optimizer_step_pre_hook(lambda opt, a, k: timer.enter("optimizer"))
    harness_on_step = rec.on_step

    def on_step(optimizer, skipped=False):
        timer.exit("optimizer")
        harness_on_step(optimizer, skipped)
        prof.on_step()

    rec.on_step = on_step  # type: ignore[method-assign]  # the recorder's step hook, chained on this instance

    # forward: the outermost module call; always_call so a forward that raises still closes it.
    register_module_forward_pre_hook(lambda mod, args: timer.enter("forward"))
    register_module_forward_hook(lambda mod, args, out: timer.exit("forward"), always_call=True)

    # data: the loader iterator (every DataLoader iterator class inherits this __next__).
    from torch.utils.data import dataloader

    dataloader._BaseDataLoaderIter.__next__ = _phase(timer, "data", dataloader._BaseDataLoaderIter.__next__)  # type: ignore[method-assign]  # patched in place in the rank: how the harness observes it
    dataloader.DataLoader.__iter__ = _phase(timer, "data", dataloader.DataLoader.__iter__)  # type: ignore[method-assign]  # patched in place in the rank: how the harness observes it

    # backward: Tensor.backward calls torch.autograd.backward; the nesting counts it once.
    torch.Tensor.backward = _phase(timer, "backward", torch.Tensor.backward)  # type: ignore[method-assign]  # patched in place in the rank: how the harness observes it
    torch.autograd.backward = _phase(timer, "backward", torch.autograd.backward)
    torch.autograd.grad = _phase(timer, "backward", torch.autograd.grad)

    # sync: the collective trace calls its listeners around every operator it issues, every
    # Work.wait and every functional-collective wait (DTensor's).
    if rec.tracer is not None:
        rec.tracer.listeners.append((lambda: timer.enter("sync"), lambda: timer.exit("sync")))

    # checkpoint: chain whatever torch.save is now (the harness's own save trace, fault injection),
    # and the other ways a checkpoint reaches storage: file copies and the kit's artifact store.
    bg = threading.local()  # nesting depth on other threads: an upload's own copy is counted once

    def checkpoint_phase(inner):
        @functools.wraps(inner)
        def wrapped(*args, **kwargs):
            if threading.get_ident() != timer.thread:
                depth = getattr(bg, "depth", 0)
                bg.depth = depth + 1
                t0 = time.perf_counter()
                try:
                    return inner(*args, **kwargs)
                finally:
                    bg.depth = depth
                    if depth == 0:
                        prof.background_save(time.perf_counter() - t0)
            timer.enter("checkpoint")
            try:
                return inner(*args, **kwargs)
            finally:
                timer.exit("checkpoint")
        return wrapped

    torch.save = checkpoint_phase(torch.save)
    shutil.copyfile = checkpoint_phase(shutil.copyfile)
    from harness.workloads import ArtifactStore

    ArtifactStore.upload = checkpoint_phase(ArtifactStore.upload)  # type: ignore[method-assign]  # wrapped in place, as the rank calls it
    return prof

