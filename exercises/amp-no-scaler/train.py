"""
Deep MLP forecasting an asset's next-day log return from standardised daily signals, trained
with DDP in fp16 mixed precision (autocast), with gradient clipping. Daily returns are small by
nature: about 1e-2 for a liquid asset.

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
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# -----------------------------------------------------------------------------
# data
DATASET_SIZE = 2048
FEATURES = 32  # standardised signals per day
DAILY_VOL = 0.01  # the asset's daily volatility: returns are fractions, not percent
# optimisation
GLOBAL_BATCH = 64  # samples per optimizer step, summed over ranks
EPOCHS = 12
LEARNING_RATE = 1e-3
WEIGHT_DECAY = 0.0
MAX_GRAD_NORM = 1.0
AMP_DTYPE = torch.float16
# model
HIDDEN = 64
DEPTH = 12
# logging and checkpoints
LOG_INTERVAL = 16
OUT_DIR = "out"
SEED = 1337
# -----------------------------------------------------------------------------


class DailyReturns(Dataset):
    """Days of ``features`` standardised signals and the next day's log return, ``vol * (x @ w +
    noise)``: a fixed, learnable relation at the asset's daily volatility, generated from a seed."""

    def __init__(self, size: int, features: int = 32, vol: float = 0.01, seed: int = 0, noise: float = 0.01):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, features, generator=g)
        w = torch.randn(features, 1, generator=g) / math.sqrt(features)
        self.y = vol * (self.x @ w + noise * torch.randn(size, 1, generator=g))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


class MLP(nn.Module):
    """Linear layers with GELU between them. The initial weights come from ``seed`` alone, whatever
    else has drawn from the global RNG before."""

    def __init__(self, features: int = 32, hidden: int = 128, targets: int = 1, depth: int = 3, seed: int = 0):
        super().__init__()
        layers: list[nn.Module] = []
        width = features
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            for _ in range(depth - 1):
                layers += [nn.Linear(width, hidden), nn.GELU()]
                width = hidden
            layers.append(nn.Linear(width, targets))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


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
    assert GLOBAL_BATCH % world_size == 0, "GLOBAL_BATCH must divide evenly across ranks"
    batch_size = GLOBAL_BATCH // world_size

    torch.manual_seed(SEED)
    train_set = DailyReturns(DATASET_SIZE, FEATURES, DAILY_VOL, seed=SEED)
    sampler = DistributedSampler(train_set, shuffle=True, seed=SEED, drop_last=True)
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, drop_last=True)

    model = MLP(FEATURES, HIDDEN, 1, DEPTH).to(device)
    raw_model = model
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)

    step = 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            with torch.autocast(device_type=device.type, dtype=AMP_DTYPE):
                loss = F.mse_loss(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
            optimizer.step()
            step += 1

            if master_process and step % LOG_INTERVAL == 0:
                dt = (time.time() - t0) / LOG_INTERVAL
                t0 = time.time()
                print(f"epoch {epoch} step {step:4d} | loss {loss.item():.3e} | grad norm {grad_norm.item():.3e} | "
                      f"{dt * 1000:.1f} ms/step", flush=True)

    if master_process:
        os.makedirs(OUT_DIR, exist_ok=True)
        state = {"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
        torch.save(state, os.path.join(OUT_DIR, "ckpt.pt.tmp"))
        os.replace(os.path.join(OUT_DIR, "ckpt.pt.tmp"), os.path.join(OUT_DIR, "ckpt.pt"))
        print(f"done after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
