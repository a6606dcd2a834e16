"""A plain DDP job for measuring the harness's overhead. It times its own steps (after warm-up)
and rank 0 prints `steps_per_s=<x>`: the same self-measurement with and without the harness.

    torchrun --standalone --nproc-per-node 2 benchmarks/ddp_bench.py
"""
import os
import time

import torch
import torch.distributed as dist
from ddp_model import build

STEPS, WARMUP = 300, 20

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
local_rank = int(os.environ.get("LOCAL_RANK", 0))
device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
model, opt, x = build(device)
for step in range(STEPS):
    if step == WARMUP:
        t0 = time.perf_counter()
    loss = model(x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
if device.type == "cuda":
    torch.cuda.synchronize()
if dist.get_rank() == 0:
    print(f"steps_per_s={(STEPS - WARMUP) / (time.perf_counter() - t0):.2f}", flush=True)
dist.destroy_process_group()
