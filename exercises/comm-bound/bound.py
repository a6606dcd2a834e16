"""
Compute bound of train.py (kit-owned: not part of a submission).

The same model, optimizer, per-rank micro-batches, gradient accumulation and number of optimizer
steps as train.py, with every batch in memory before the first step: no input pipeline and no
communication (no process group, no gradient averaging). Each rank trains its own replica on the
micro-batches its DistributedSampler would hand it, so its steps/s is what the model's compute
alone allows on this machine at this world size.

    torchrun --standalone --nproc-per-node 2 bound.py
"""

import os

import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler

from train import (ACCUM_STEPS, DATASET_SIZE, DEPTH, EPOCHS, FEATURES, GLOBAL_BATCH, LEARNING_RATE, SEED,
                   WIDTH, ResidualMLP, SyntheticRegression)


def main() -> None:
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank % torch.cuda.device_count()}") if torch.cuda.is_available() else torch.device("cpu")
    micro_batch = GLOBAL_BATCH // (world_size * ACCUM_STEPS)

    torch.manual_seed(SEED)
    data = SyntheticRegression(DATASET_SIZE, FEATURES, seed=SEED)
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=SEED,
                                 drop_last=True)
    steps = []  # per optimizer step, its ACCUM_STEPS micro-batches
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        order = list(sampler)
        micro = [order[b * micro_batch:(b + 1) * micro_batch] for b in range(len(order) // micro_batch)]
        for s in range(len(micro) // ACCUM_STEPS):
            steps.append([(data.x[idx].to(device), data.y[idx].to(device))
                          for idx in micro[s * ACCUM_STEPS:(s + 1) * ACCUM_STEPS]])

    model = ResidualMLP(FEATURES, WIDTH, DEPTH).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    for micro_batches in steps:
        optimizer.zero_grad(set_to_none=True)
        for x, y in micro_batches:
            loss = F.mse_loss(model(x), y) / ACCUM_STEPS
            loss.backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
