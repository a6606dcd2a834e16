"""
Regression MLP trained with DDP, with a held-out loss tracked through the run for the end-of-run
report.

Launch (one process per GPU, or per CPU core with gloo):

    torchrun --standalone --nproc-per-node 2 train.py
"""

import json
import math
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

# -----------------------------------------------------------------------------
# data
DATASET_SIZE = 4096
VAL_SIZE = 4096
FEATURES = 32
# optimisation
GLOBAL_BATCH = 64  # samples per optimizer step, summed over ranks
VAL_BATCH = 1024
EPOCHS = 3
LEARNING_RATE = 3e-3
WEIGHT_DECAY = 0.01
# model
HIDDEN = 256
DEPTH = 3
# bookkeeping
EVAL_INTERVAL = 2  # steps between held-out evaluations
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


def memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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
    # one task, split: the first DATASET_SIZE samples train, the next VAL_SIZE are held out
    task = dict(size=DATASET_SIZE + VAL_SIZE, features=FEATURES, seed=SEED)
    train_set = Subset(SyntheticRegression(**task), range(DATASET_SIZE))
    val_set = Subset(SyntheticRegression(**task), range(DATASET_SIZE, DATASET_SIZE + VAL_SIZE))
    sampler = DistributedSampler(train_set, shuffle=True, seed=SEED, drop_last=True)
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=VAL_BATCH, shuffle=False)

    model = MLP(FEATURES, HIDDEN, 1, DEPTH).to(device)
    raw_model = model
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)

    history = {"train": [], "val": []}
    if master_process:  # one line per evaluation, as it happens
        os.makedirs(OUT_DIR, exist_ok=True)
        metrics_log = open(os.path.join(OUT_DIR, "metrics.jsonl"), "w", buffering=1)
    val_iter = iter(val_loader)
    step = 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = F.mse_loss(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            history["train"].append(loss.item())

            if step % EVAL_INTERVAL == 0:
                try:
                    xv, yv = next(val_iter)
                except StopIteration:
                    val_iter = iter(val_loader)
                    xv, yv = next(val_iter)
                xv, yv = xv.to(device), yv.to(device)
                with torch.no_grad():
                    val_loss = F.mse_loss(raw_model(xv), yv)
                history["val"].append(val_loss.item())
                if master_process:
                    metrics_log.write(json.dumps({"step": step, "val_loss": float(val_loss)}) + "\n")

            if master_process and step % LOG_INTERVAL == 0:
                val = history["val"][-1] if history["val"] else float("nan")
                dt = (time.time() - t0) / LOG_INTERVAL
                t0 = time.time()
                print(f"epoch {epoch} step {step:4d} | loss {loss.item():.4f} | val {val:.4f} | "
                      f"{dt * 1000:.1f} ms/step | mem {memory_mb(device):.0f} MB", flush=True)

    if master_process:
        os.makedirs(OUT_DIR, exist_ok=True)
        tmp = os.path.join(OUT_DIR, "ckpt.pt.tmp")
        torch.save({"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp)
        os.replace(tmp, os.path.join(OUT_DIR, "ckpt.pt"))
        report = {
            "steps": step,
            "final_train_loss": sum(history["train"][-LOG_INTERVAL:]) / LOG_INTERVAL,
            "final_val_loss": sum(history["val"][-8:]) / 8,
        }
        with open(os.path.join(OUT_DIR, "report.json"), "w") as f:
            json.dump(report, f, indent=2)
        print(f"done: {json.dumps(report)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
