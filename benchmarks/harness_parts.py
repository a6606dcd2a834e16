"""What each part of the harness costs per optimizer step, inside one job: ddp_bench's model and loop
in blocks of steps, each block with some of the harness's parts switched off, the blocks of every
configuration interleaved (the order reversed every other round), medians per configuration.

    trainwreck run benchmarks/harness_parts.py --nproc 1 [-- --rounds 30 --block 40 --configs "off;on;trace"]

One process against itself: no launch-to-launch spread (a single launch of ddp_bench moves by ±7%
in steps/s on the 2-core machine), and at one rank no peer's jitter either, so differences of a few
tens of microseconds per step show. Rank 0 prints one line per configuration: ``us_per_step``, its
CPU time per step and the difference from ``off`` (every part switched off).

A configuration is a comma-separated list of parts switched off; ``on`` is the harness as it runs:
- ``trace``: the collective trace's operator kernels (none registered: torch's own dispatch);
- ``tracenull``: Python kernels that only pass the call on (the cost of a Python kernel itself);
- ``step``: the optimizer step hook (step records, the trace's sweep and flush);
- ``bwd``: the wrappers of ``Tensor.backward`` and ``torch.autograd.backward`` (the loss);
- ``work``, ``mem``: the grading evidence, when the job runs with it (``TRAINWRECK_GRADING_EVIDENCE=1``):
  the ``nn.Module.__call__`` wrapper and the work fields, the memory counts;
- ``off``: all of the above.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
from ddp_model import build

from harness import collectives, instrument

PARTS = ("trace", "tracenull", "step", "bwd", "work", "mem")


def unwrap(fn):
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


class Switch:
    """Puts the harness's parts in or takes them out, between blocks of steps."""

    def __init__(self, rec: instrument.Recorder):
        self.rec = rec
        self.orig = {"call": torch.nn.Module.__call__, "tb": torch.Tensor.backward, "ab": torch.autograd.backward,
                     "on_step": rec.on_step, "fields": list(rec.step_fields)}
        self.native = getattr(rec.tracer, "kind", "") == "native"  # the C++ kernels (harness.native_trace)
        self.kernels: str | None = "trace" if collectives._lib is not None or self.native else None

    def _kernels(self, kind: str | None) -> None:
        if kind == self.kernels:
            return
        if self.native and self.kernels == "trace":
            self.rec.tracer.switch(False)
        if collectives._lib is not None:
            collectives._lib._destroy()
            collectives._lib = None
        if kind == "trace" and self.native:
            self.rec.tracer.switch(True)
        elif kind is not None:
            lib = torch.library.Library("c10d", "IMPL")
            for name in collectives.OPS:
                packet = getattr(torch.ops.c10d, name, None)
                if packet is None:
                    continue
                kernel = (collectives._kernel(self.rec.tracer, name, packet.default) if kind == "trace"
                          else _pass_on(packet.default))
                lib.impl(name, kernel, "BackendSelect", with_keyset=True)
            collectives._lib = lib
        self.kernels = kind

    def apply(self, config: str) -> None:
        off = set(filter(None, config.split(",")))
        if "off" in off:
            off |= {"trace", "step", "bwd", "work", "mem"}
        self._kernels(None if "trace" in off else "null" if "tracenull" in off else "trace")
        o = self.orig
        torch.nn.Module.__call__ = unwrap(o["call"]) if "work" in off else o["call"]
        torch.Tensor.backward = unwrap(o["tb"]) if "bwd" in off else o["tb"]
        torch.autograd.backward = unwrap(o["ab"]) if "bwd" in off else o["ab"]
        self.rec.on_step = (lambda *a, **k: None) if "step" in off else o["on_step"]
        gone = {f"harness.{p}" for p in ("work", "mem") if p in off}
        self.rec.step_fields[:] = [f for f in o["fields"]
                                   if getattr(f, "__module__", "").replace("memstats", "mem") not in gone]


def _pass_on(opov):
    after = collectives._AFTER_BACKEND_SELECT
    redispatch = opov._handle.redispatch_boxed

    def kernel(keyset, *args, **kwargs):
        return redispatch(keyset & after, *args, **kwargs)

    return kernel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--block", type=int, default=40, help="steps per block")
    ap.add_argument("--configs", default="off;on;trace;tracenull;step;bwd")
    args = ap.parse_args()
    rec = instrument.current()
    if rec is None or rec.tracer is None:
        raise SystemExit("run this under `trainwreck run`: it switches the harness's own parts")
    cuda = torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    model, opt, x = build(device)

    def block(n: int) -> None:
        for _ in range(n):
            loss = model(x).pow(2).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if cuda:
            torch.cuda.synchronize()

    block(30)
    sw = Switch(rec)
    configs = args.configs.split(";")
    wall: dict[str, list[float]] = {c: [] for c in configs}
    cpu: dict[str, list[float]] = {c: [] for c in configs}
    for r in range(args.rounds):
        for c in configs if r % 2 == 0 else configs[::-1]:
            sw.apply(c)
            block(3)
            dist.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
            block(args.block)
            wall[c].append((time.perf_counter() - t0) / args.block * 1e6)
            cpu[c].append((time.process_time() - c0) / args.block * 1e6)
    sw.apply("on")
    if dist.get_rank() == 0:
        base = statistics.median(wall["off"]) if "off" in wall else None
        for c in configs:
            m = statistics.median(wall[c])
            vs = f" vs_off={m - base:+.0f}us ({m / base - 1:+.1%})" if base else ""
            print(f"harness_parts {c:10s} us_per_step={m:.0f} cpu_us_per_step={statistics.median(cpu[c]):.0f}{vs}",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
