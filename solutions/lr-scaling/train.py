"""
Regression MLP trained data-parallel: each rank computes gradients on its shard of the batch, and
the gradients are all-reduced before every optimizer step. Tuned on one GPU; now run on several.

Launch (one process per GPU, or per CPU core with gloo):

    torchrun --standalone --nproc-per-node 2 train.py
    torchrun --standalone --nproc-per-node 1 train.py   # the single-process baseline
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
FEATURES = 32
# optimisation (tuned on a single GPU)
GLOBAL_BATCH = 64  # samples per optimizer step, summed over ranks
EPOCHS = 2
LEARNING_RATE = 0.05
MOMENTUM = 0.9
# model
HIDDEN = 128
DEPTH = 3
# logging and checkpoints
LOG_INTERVAL = 16
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

    model = MLP(FEATURES, HIDDEN, 1, DEPTH).to(device)
    for p in model.parameters():  # every rank starts from rank 0's weights
        dist.broadcast(p.data, src=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    if master_process:
        print(f"world size {world_size}, {len(loader)} steps per epoch of {batch_size} samples per rank",
              flush=True)

    step = 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.mse_loss(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad.div_(world_size)
            optimizer.step()
            step += 1

            if step % LOG_INTERVAL == 0:
                loss_sum = loss.detach().clone()
                dist.all_reduce(loss_sum)
                if master_process:
                    dt = (time.time() - t0) / LOG_INTERVAL
                    t0 = time.time()
                    print(f"epoch {epoch} step {step:4d} | loss {loss_sum.item() / world_size:.5f} | "
                          f"{dt * 1000:.1f} ms/step", flush=True)

    if master_process:
        os.makedirs(OUT_DIR, exist_ok=True)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                   os.path.join(OUT_DIR, "ckpt.pt.tmp"))
        os.replace(os.path.join(OUT_DIR, "ckpt.pt.tmp"), os.path.join(OUT_DIR, "ckpt.pt"))
        print(f"done after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
