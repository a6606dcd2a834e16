"""
Deep residual MLP trained data-parallel with gradient accumulation: each optimizer step
accumulates ACCUM_STEPS micro-batches, and gradients are averaged across ranks.

Launch (one process per GPU, or per CPU core with gloo):

    torchrun --standalone --nproc-per-node 2 train.py
"""

import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# -----------------------------------------------------------------------------
# data
DATASET_SIZE = 4096
FEATURES = 128
# optimisation
GLOBAL_BATCH = 256  # samples per optimizer step, summed over ranks and micro-batches
ACCUM_STEPS = 4  # micro-batches per optimizer step on each rank
EPOCHS = 2
LEARNING_RATE = 1e-3
# model
WIDTH = 128
DEPTH = 24
# logging and checkpoints
LOG_INTERVAL = 8
OUT_DIR = "out"
SEED = 1337
# -----------------------------------------------------------------------------


class SyntheticRegression(Dataset):
    """``y = x @ w + noise`` with ``x`` standard normal, generated from a seed: a fixed, learnable target."""

    def __init__(self, size: int, features: int = 32, targets: int = 1, seed: int = 0, noise: float = 0.01):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, features, generator=g)
        w = torch.randn(features, targets, generator=g) / math.sqrt(features)
        self.y = self.x @ w + noise * torch.randn(size, targets, generator=g)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


class ResidualMLP(nn.Module):
    """A deep residual MLP: many small layers. The initial weights come from ``seed`` alone,
    whatever else has drawn from the global RNG before."""

    def __init__(self, features: int, width: int, depth: int, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.inp = nn.Linear(features, width)
            self.blocks = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
            self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = h + F.gelu(block(h)) / len(self.blocks)
        return self.out(h)


def gpu_per_rank() -> bool:
    """Whether every rank on this node has a GPU of its own, as NCCL needs (ranks sharing one use gloo)."""
    return torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", 1))


def main() -> None:
    dist.init_process_group(backend="nccl" if gpu_per_rank() else "gloo")
    rank = dist.get_rank()
    world_size = dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    master_process = rank == 0
    if torch.cuda.is_available():
        device = torch.device(f"cuda:{local_rank % torch.cuda.device_count()}")
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    assert GLOBAL_BATCH % (world_size * ACCUM_STEPS) == 0, "GLOBAL_BATCH must split into ranks x micro-batches"
    micro_batch = GLOBAL_BATCH // (world_size * ACCUM_STEPS)

    torch.manual_seed(SEED)
    train_set = SyntheticRegression(DATASET_SIZE, FEATURES, seed=SEED)
    sampler = DistributedSampler(train_set, shuffle=True, seed=SEED, drop_last=True)
    loader = DataLoader(train_set, batch_size=micro_batch, sampler=sampler, drop_last=True)

    model = ResidualMLP(FEATURES, WIDTH, DEPTH).to(device)
    for p in model.parameters():  # every rank starts from rank 0's weights
        dist.broadcast(p.data, src=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)

    step = 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        batches = iter(loader)
        for _ in range(len(loader) // ACCUM_STEPS):
            optimizer.zero_grad(set_to_none=True)
            for micro in range(ACCUM_STEPS):
                x, y = next(batches)
                x, y = x.to(device), y.to(device)
                loss = F.mse_loss(model(x), y) / ACCUM_STEPS
                loss.backward()
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad.div_(world_size)
            optimizer.step()
            step += 1

            if master_process and step % LOG_INTERVAL == 0:
                dt = (time.time() - t0) / LOG_INTERVAL
                t0 = time.time()
                print(f"epoch {epoch} step {step:4d} | loss {loss.item() * ACCUM_STEPS:.5f} | "
                      f"{dt * 1000:.1f} ms/step | {GLOBAL_BATCH / dt:.0f} samples/s", flush=True)

    if master_process:
        os.makedirs(OUT_DIR, exist_ok=True)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                   os.path.join(OUT_DIR, "ckpt.pt.tmp"))
        os.replace(os.path.join(OUT_DIR, "ckpt.pt.tmp"), os.path.join(OUT_DIR, "ckpt.pt"))
        print(f"done after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
