"""
Compute bound of train.py (kit-owned: not part of a submission).

The same model, optimizer, per-rank batches and number of optimizer steps as train.py, with every
batch decoded and in memory before the first step: no input pipeline and no communication (no
process group, no DDP). Each rank trains its own replica on the batches its DistributedSampler
would hand it, so its steps/s is what the model's compute alone allows on this machine at this
world size.

    torchrun --standalone --nproc-per-node 2 bound.py
"""

import os

import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler
from train import (
    AXES,
    DATASET_SIZE,
    DEPTH,
    EPOCHS,
    GLOBAL_BATCH,
    LEARNING_RATE,
    MLP,
    N_FEATURES,
    SEED,
    TRACE_LEN,
    WIDTH,
    SensorRecords,
    spectral_features,
)


def main() -> None:
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank % torch.cuda.device_count()}") if torch.cuda.is_available() else torch.device("cpu")
    batch_size = GLOBAL_BATCH // world_size

    torch.manual_seed(SEED)
    records = SensorRecords(DATASET_SIZE, TRACE_LEN, AXES, seed=SEED)
    sampler = DistributedSampler(records, num_replicas=world_size, rank=rank, shuffle=True, seed=SEED,
                                 drop_last=True)
    features: dict[int, torch.Tensor] = {}
    batches = []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        order = list(sampler)
        for b in range(len(order) // batch_size):
            idx = order[b * batch_size:(b + 1) * batch_size]
            for i in idx:
                if i not in features:
                    features[i] = spectral_features(records[i][0])
            x = torch.stack([features[i] for i in idx]).to(device)
            y = torch.stack([records[i][1] for i in idx]).to(device)
            batches.append((x, y))

    model = MLP(features=N_FEATURES, hidden=WIDTH, targets=1, depth=DEPTH).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    for x, y in batches:
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()
