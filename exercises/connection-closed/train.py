"""
Remaining-useful-life regressor for rotating machinery, trained with DDP on vibration features.
Each record of the fleet's export (data/bearings.pt) holds the band energies of one bearing's
accelerometers and its remaining life. A sensor channel that drops out reads NaN; a batch whose
loss is not finite is skipped and counted.

Launch (one process per GPU, or per CPU core with gloo):

    torchrun --standalone --nproc-per-node 2 train.py
    torchrun --standalone --nproc-per-node 1 train.py   # the same global batch on one process
"""

import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# -----------------------------------------------------------------------------
# data: the fleet's export of bearing records
DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
# optimisation
GLOBAL_BATCH = 64  # records per optimizer step, summed over ranks
EPOCHS = 2
LEARNING_RATE = 1e-3
WEIGHT_DECAY = 0.01
# model
HIDDEN = 128
DEPTH = 3
# logging
LOG_INTERVAL = 16
SEED = 1337
# -----------------------------------------------------------------------------


class SensorRecords(Dataset):
    """Band energies of one bearing's accelerometers and its remaining life (in log hours)."""

    def __init__(self, path: str):
        records = torch.load(path)
        self.features = records["features"]
        self.life = records["life"]

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.features[i], self.life[i]


class Regressor(nn.Module):
    def __init__(self, features: int, hidden: int, depth: int):
        super().__init__()
        layers: list[nn.Module] = [nn.LayerNorm(features)]
        width = features
        for _ in range(depth - 1):
            layers += [nn.Linear(width, hidden), nn.GELU()]
            width = hidden
        layers.append(nn.Linear(width, 1))
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
    assert GLOBAL_BATCH % world_size == 0, "GLOBAL_BATCH must split evenly over the ranks"

    torch.manual_seed(SEED)
    train_set = SensorRecords(os.path.join(DATA_DIR, "bearings.pt"))
    sampler = DistributedSampler(train_set, shuffle=True, seed=SEED, drop_last=True)
    loader = DataLoader(train_set, batch_size=GLOBAL_BATCH // world_size, sampler=sampler, drop_last=True)

    model = Regressor(train_set.features.shape[1], HIDDEN, DEPTH).to(device)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    if master_process:
        print(f"world size {world_size}: {len(loader)} steps per epoch of {GLOBAL_BATCH} records", flush=True)

    step = skipped = 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, life in loader:
            x, life = x.to(device), life.to(device)
            loss = F.mse_loss(model(x), life)
            if not torch.isfinite(loss):
                skipped += 1
                print(f"rank {rank} epoch {epoch}: non-finite loss, batch skipped ({skipped} so far)", flush=True)
                continue
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1

            if master_process and step % LOG_INTERVAL == 0:
                dt = (time.time() - t0) / LOG_INTERVAL
                t0 = time.time()
                print(f"epoch {epoch} step {step:4d} | loss {loss.item():.5f} | {dt * 1000:.1f} ms/step", flush=True)

    print(f"rank {rank}: done after {step} steps, {skipped} batches skipped", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
