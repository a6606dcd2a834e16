"""
(A valid fix in another style: each checkpoint is a folder of files, as the HF Trainer lays it out
-- model, optimizer, scheduler, trainer state -- staged under a hidden name and published by one
atomic rename of the folder.)

Regression MLP trained with DDP and AdamW on a preemptible pool: linear warm-up then cosine decay,
a checkpoint at the end of every epoch, and a restarted job (torchrun --max-restarts) picks up from
the newest checkpoint in OUT_DIR.

Launch (one process per GPU, or per CPU core with gloo):

    torchrun --standalone --nproc-per-node 2 --max-restarts 3 train.py
"""

import glob
import json
import math
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# -----------------------------------------------------------------------------
# data
DATASET_SIZE = 256
FEATURES = 32
# optimisation
GLOBAL_BATCH = 32  # samples per optimizer step, summed over ranks
EPOCHS = 12
LEARNING_RATE = 3e-3  # peak, reached at the end of warm-up
MIN_LR = 3e-4  # end of the cosine decay
WARMUP_STEPS = 16
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)
# model
HIDDEN = 128
DEPTH = 3
# checkpoints and logging
OUT_DIR = "out"
LOG_INTERVAL = 4
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


def lr_factor(step: int, total_steps: int) -> float:
    """Multiplier of LEARNING_RATE at optimizer step ``step``: linear warm-up, then cosine decay."""
    if step < WARMUP_STEPS:
        return (step + 1) / WARMUP_STEPS
    progress = min(1.0, (step - WARMUP_STEPS) / max(1, total_steps - WARMUP_STEPS))
    floor = MIN_LR / LEARNING_RATE
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def ckpt_dir(epoch: int) -> str:
    return os.path.join(OUT_DIR, f"checkpoint-{epoch:03d}")


def latest_checkpoint() -> str | None:
    """The newest checkpoint folder in OUT_DIR. A folder gets its final name only once every file
    in it is written (see save_checkpoint); staging folders are hidden (".tmp-...")."""
    paths = sorted(glob.glob(os.path.join(OUT_DIR, "checkpoint-*")))
    return paths[-1] if paths else None


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(final: str, model, optimizer, scheduler, epoch: int, step: int) -> None:
    """Write every file into a hidden staging folder, flush them, then rename the folder into place:
    a reader sees the previous checkpoint or the new one, whole, never part of one."""
    staging = os.path.join(os.path.dirname(final), ".tmp-" + os.path.basename(final))
    shutil.rmtree(staging, ignore_errors=True)  # a staging folder a killed job left behind
    os.makedirs(staging)
    torch.save(model.state_dict(), os.path.join(staging, "pytorch_model.bin"))
    torch.save(optimizer.state_dict(), os.path.join(staging, "optimizer.pt"))
    torch.save(scheduler.state_dict(), os.path.join(staging, "scheduler.pt"))
    with open(os.path.join(staging, "trainer_state.json"), "w") as f:
        json.dump({"epoch": epoch, "global_step": step}, f)
    for name in os.listdir(staging):
        _fsync(os.path.join(staging, name))
    _fsync(staging)
    os.rename(staging, final)
    _fsync(os.path.dirname(final) or ".")  # and the rename itself survives a crash of the machine


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
    train_set = SyntheticRegression(DATASET_SIZE, FEATURES, seed=SEED)
    sampler = DistributedSampler(train_set, shuffle=True, seed=SEED, drop_last=True)
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, drop_last=True)
    total_steps = EPOCHS * len(loader)

    model = MLP(FEATURES, HIDDEN, 1, DEPTH).to(device)
    raw_model = model
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=BETAS,
                                  weight_decay=WEIGHT_DECAY)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, total_steps))

    # The whole training state comes back, on every rank: each rank steps its own optimizer.
    start_epoch, step = 0, 0
    os.makedirs(OUT_DIR, exist_ok=True)
    path = latest_checkpoint()
    if path is not None:
        raw_model.load_state_dict(torch.load(os.path.join(path, "pytorch_model.bin"), map_location=device))
        optimizer.load_state_dict(torch.load(os.path.join(path, "optimizer.pt"), map_location=device))
        scheduler.load_state_dict(torch.load(os.path.join(path, "scheduler.pt")))
        with open(os.path.join(path, "trainer_state.json")) as f:
            trainer_state = json.load(f)
        start_epoch, step = trainer_state["epoch"] + 1, trainer_state["global_step"]
        if master_process:
            print(f"resumed from {path}: continuing at epoch {start_epoch}, step {step}", flush=True)
    t0 = time.time()
    for epoch in range(start_epoch, EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.mse_loss(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1

            if master_process and step % LOG_INTERVAL == 0:
                dt = (time.time() - t0) / LOG_INTERVAL
                t0 = time.time()
                print(f"epoch {epoch:2d} step {step:3d} | loss {loss.item():.5f} | "
                      f"lr {optimizer.param_groups[0]['lr']:.2e} | {dt * 1000:.1f} ms/step", flush=True)
        if master_process:  # the replicas are identical: one writer per checkpoint
            save_checkpoint(ckpt_dir(epoch), raw_model, optimizer, scheduler, epoch, step)

    if master_process:
        print(f"done after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
