"""The harness's own cost per call, inside a real 2-rank gloo DDP job (ddp_bench's model): the
optimizer step hook (``Recorder.on_step``: the step record, its fields, the sweep of open works) and
the collective trace's two records per collective (``Tracer.issue`` at the call, the completion
when ``Work.wait`` returns), each timed around the harness's own function, so the figures are the
harness's work alone, not the training or the communication around it.

    trainwreck run benchmarks/harness_calls.py --nproc 2 [--sandbox] -- [--steps 400] [--collectives 2000]

Rank 0 prints medians in microseconds (``harness_calls ...``). Medians, because a loaded machine
and the periodic work (the live-tensor count every few steps) make the means move.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from harness import instrument

WIDTH, DEPTH, BATCH = 256, 8, 64


def timed(obj, attr: str, into: list[float]) -> None:
    """Replace ``obj.attr`` (looked up per call by its callers) with a wrapper that times each call."""
    fn = getattr(obj, attr)

    def wrapper(*args, **kwargs):
        t = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            into.append((time.perf_counter_ns() - t) / 1e3)

    setattr(obj, attr, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--collectives", type=int, default=2000)
    args = ap.parse_args()
    rec = instrument.current()
    if rec is None or rec.tracer is None:
        raise SystemExit("run this under `trainwreck run`: it times the harness's own hooks")
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = DDP(torch.nn.Sequential(*layers))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(BATCH, WIDTH)

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
    issue: list[float] = []
    done: list[float] = []
    timed(rec.tracer, "issue", issue)
    timed(rec.tracer, "finished", done)
    t = torch.ones(1024)
    for _ in range(args.collectives):
        dist.all_reduce(t)  # synchronous: enter at the call, exit when its Work.wait returns
    if dist.get_rank() == 0:
        med = statistics.median
        print(f"harness_calls pid={os.getpid()} on_step_us={med(on_step):.1f} issue_us={med(issue):.1f} "
              f"finished_us={med(done):.1f} enter_exit_us={med(issue) + med(done):.1f} "
              f"(medians of {len(on_step)} steps and {len(issue)} all_reduces)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
