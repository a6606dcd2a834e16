"""The harness's own cost per call, inside a real 2-rank gloo DDP job (ddp_bench's model): the
optimizer step hook (``Recorder.on_step``: the step record, its fields, the sweep of open works) and
the collective trace's two records per collective (``Tracer.issue`` at the call, the completion
when ``Work.wait`` returns), each timed around the harness's own function, so the figures are the
harness's work alone, not the training or the communication around it. With the C++ kernel
(``harness.native_trace``) there is no Python function to time: whole all_reduces are timed in
blocks with its kernels in and out, and the difference is its cost per call.

    trainwreck run benchmarks/harness_calls.py --nproc 2 [--sandbox] -- [--steps 400] [--collectives 2000]

Rank 0 prints medians in microseconds (``harness_calls ...``). Medians, because a loaded machine
and the periodic work (the live-tensor count every few steps) make the means move.

Then two lines on where a training step's harness time goes:
- ``harness_per_step``: each part's thread CPU time summed over a step, meaned over the steps
  (``issue``, ``track`` and ``sweep`` run once per collective or more, with the Python kernel only;
  ``on_step`` includes the step record's ``write`` and the trace's ``trace_on_step``; ``flush`` runs
  on the trace's own thread);
- ``harness_cold``: one step record signed with the caches warm (back to back) and cold (after a
  matmul and a pass over 4 MB, as in a training step): what the harness's Python costs between
  torch's kernels is several times what a microbenchmark of it says.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from ddp_model import build

from harness import instrument, rundir


def timed(obj, attr: str, into: list[float], clock=time.perf_counter_ns) -> None:
    """Replace ``obj.attr`` (looked up per call by its callers) with a wrapper that times each call."""
    fn = getattr(obj, attr)

    def wrapper(*args, **kwargs):
        t = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            into.append((clock() - t) / 1e3)

    setattr(obj, attr, wrapper)


def per_step(rec: instrument.Recorder, step, steps: int) -> dict[str, float]:
    """Thread CPU microseconds per training step of each harness part (a fresh set of wrappers)."""
    parts = {"on_step": (rec, "on_step"), "write": (rec.events, "write"), "flush": (rec.tracer, "flush"),
             "issue": (rec.tracer, "issue"), "track": (rec.tracer, "track"), "sweep": (rec.tracer, "sweep"),
             "trace_on_step": (rec.tracer, "on_step"), "on_backward": (rec, "on_backward")}
    calls: dict[str, list[float]] = {name: [] for name in parts}
    for name, (obj, attr) in parts.items():
        timed(obj, attr, calls[name], clock=time.thread_time_ns)
    for _ in range(steps):
        step()
    return {name: sum(v) / steps for name, v in calls.items()}


def cold_sign(key: str, n: int = 200) -> tuple[float, float]:
    """Median thread CPU microseconds of signing one step record, caches warm and cold."""
    record = {"kind": "step", "attempt": 0, "t": time.time(), "step": 100, "dt": 0.0075, "rss_mb": 512.3,
              "lr": [0.001], "loss": 0.123456, "n_backward": 1}
    a, b, big = torch.randn(512, 512), torch.randn(512, 512), torch.randn(1 << 20)
    out = []
    for cold in (False, True):
        times = []
        for _ in range(n):
            if cold:
                a @ b
                big.sum()
            t = time.thread_time_ns()
            rundir.sign(record, key)
            times.append((time.thread_time_ns() - t) / 1e3)
        out.append(statistics.median(times))
    return out[0], out[1]


def native_call(rec: instrument.Recorder, t: torch.Tensor, n: int, block: int = 100) -> str:
    """The C++ kernel has no Python function to time around: whole synchronous all_reduces, in
    blocks with its kernels registered and taken out in turn (both ranks switch at the same block)."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(2 * max(1, n // block)):
        on = i % 4 in (0, 3)  # ABBA
        rec.tracer.switch(on)
        t0 = time.perf_counter_ns()
        for _ in range(block):
            dist.all_reduce(t)
        times[on].append((time.perf_counter_ns() - t0) / block / 1e3)
    if not on:
        rec.tracer.switch(True)
    on_us, off_us = statistics.median(times[True]), statistics.median(times[False])
    return (f"all_reduce_traced_us={on_us:.1f} all_reduce_untraced_us={off_us:.1f} native_kernel_us={on_us - off_us:.1f} "
            f"(medians of blocks of {block} all_reduces, kernels in and out in turn)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--collectives", type=int, default=2000)
    args = ap.parse_args()
    rec = instrument.current()
    if rec is None or rec.tracer is None:
        raise SystemExit("run this under `trainwreck run`: it times the harness's own hooks")
    dist.init_process_group("gloo")
    model, opt, x = build(torch.device("cpu"))

    def step() -> None:
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(20):  # warm-up: the first step's freeze, the first live-tensor counts
        step()
    on_step: list[float] = []
    timed(rec, "on_step", on_step)
    for _ in range(args.steps):
        step()
    med = statistics.median
    t = torch.ones(1024)
    if rec.tracer.kind == "native":
        calls = f"harness_calls pid={os.getpid()} on_step_us={med(on_step):.1f} " + native_call(rec, t, args.collectives)
    else:
        issue: list[float] = []
        done: list[float] = []
        timed(rec.tracer, "issue", issue)
        timed(rec.tracer, "finished", done)
        for _ in range(args.collectives):
            dist.all_reduce(t)  # synchronous: enter at the call, exit when its Work.wait returns
        calls = (f"harness_calls pid={os.getpid()} on_step_us={med(on_step):.1f} issue_us={med(issue):.1f} "
                 f"finished_us={med(done):.1f} enter_exit_us={med(issue) + med(done):.1f} "
                 f"(medians of {len(on_step)} steps and {len(issue)} all_reduces)")
    parts = per_step(rec, step, args.steps)  # wraps the wrappers: the lists above are read already
    warm, cold = cold_sign(rundir.new_key())
    if dist.get_rank() == 0:
        print(calls, flush=True)
        print("harness_per_step " + " ".join(f"{k}_us={v:.1f}" for k, v in parts.items())
              + f" (thread CPU per step, mean of {args.steps} steps)", flush=True)
        print(f"harness_cold sign_warm_us={warm:.1f} sign_cold_us={cold:.1f} (medians, thread CPU)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
