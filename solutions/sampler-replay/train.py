"""
Regression MLP trained with DDP on a preemptible pool: checkpoints every few steps, and picks up
from the latest checkpoint when the job is restarted (torchrun --max-restarts).

Launch (one process per GPU, or per CPU core with gloo):

    torchrun --standalone --nproc-per-node 2 --max-restarts 3 train.py
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
DATASET_SIZE = 1024
FEATURES = 32
# optimisation
GLOBAL_BATCH = 32  # samples per optimizer step, summed over ranks
EPOCHS = 3
LEARNING_RATE = 0.02
MOMENTUM = 0.9
# model
HIDDEN = 128
DEPTH = 3
# checkpoints and logging
CKPT_INTERVAL = 8  # steps
LOG_INTERVAL = 4
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


class ResumableDistributedSampler(DistributedSampler):
    """A DistributedSampler that can begin an epoch part-way through. The skipped indices are
    dropped here, so their samples are never loaded again."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.start = 0  # position in this rank's shard of the epoch to begin at

    def __iter__(self):
        return iter(list(super().__iter__())[self.start:])

    def __len__(self) -> int:
        return self.num_samples - self.start


def save_checkpoint(path: str, state: dict) -> None:
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


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
    sampler = ResumableDistributedSampler(train_set, shuffle=True, seed=SEED, drop_last=True)
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, drop_last=True)

    model = MLP(FEATURES, HIDDEN, 1, DEPTH).to(device)
    raw_model = model
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    steps_per_epoch = len(loader)

    ckpt_path = os.path.join(OUT_DIR, "ckpt.pt")
    os.makedirs(OUT_DIR, exist_ok=True)
    start_epoch, step = 0, 0
    if os.path.exists(ckpt_path):
        ckpt = torch.load(ckpt_path, map_location=device)
        raw_model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        step = ckpt["step"]
        start_epoch = step // steps_per_epoch  # a checkpoint at an epoch's last step resumes the next
        if master_process:
            print(f"resumed from {ckpt_path} at epoch {start_epoch}, step {step}", flush=True)

    t0 = time.time()
    for epoch in range(start_epoch, EPOCHS):
        sampler.set_epoch(epoch)
        sampler.start = (step - epoch * steps_per_epoch) * batch_size  # non-zero only mid-epoch on resume
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.mse_loss(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1

            if master_process and step % LOG_INTERVAL == 0:
                dt = (time.time() - t0) / LOG_INTERVAL
                t0 = time.time()
                print(f"epoch {epoch} step {step:4d} | loss {loss.item():.5f} | {dt * 1000:.1f} ms/step",
                      flush=True)
            if master_process and step % CKPT_INTERVAL == 0:
                save_checkpoint(ckpt_path, {"model": raw_model.state_dict(),
                                            "optimizer": optimizer.state_dict(),
                                            "epoch": epoch, "step": step})

    if master_process:
        print(f"done after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
