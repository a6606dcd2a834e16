"""
Bearing-wear regressor: an MLP over the spectrum of raw vibration traces, trained data-parallel.
Each record is a raw int16 trace as the sensors store it; the model sees the log power spectrum of
the normalised trace.

Launch (one process per GPU, or per CPU core with gloo):

    torchrun --standalone --nproc-per-node 2 train.py
"""

import array
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# -----------------------------------------------------------------------------
# data
DATASET_SIZE = 8192
TRACE_LEN = 64  # int16 samples per record
N_FREQS = 32  # spectrum bins 1..N_FREQS are the model's inputs
# optimisation
GLOBAL_BATCH = 512  # samples per optimizer step, summed over ranks
EPOCHS = 2
LEARNING_RATE = 1e-3
# model
WIDTH = 768
DEPTH = 4
# logging and checkpoints
LOG_INTERVAL = 8
OUT_DIR = "out"
SEED = 1337
# -----------------------------------------------------------------------------


class SensorRecords(Dataset):
    """Raw sensor traces as stored: each item is ``(record, target)``, the record ``length``
    little-endian int16 samples as ``bytes`` (a few tones plus noise, as a sensor stores them),
    the target a fixed function of which tones are present and how loud."""

    def __init__(self, size: int, length: int = 64, tones: int = 3, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        t = torch.arange(length, dtype=torch.float64)
        freq = torch.randint(1, length // 4 + 1, (size, tones), generator=g)
        amp = torch.rand(size, tones, generator=g, dtype=torch.float64) + 0.2
        phase = torch.rand(size, tones, 1, generator=g, dtype=torch.float64) * 2 * math.pi
        wave = (amp[:, :, None] * torch.sin(2 * math.pi * freq[:, :, None] * t / length + phase)).sum(1)
        wave = wave + 0.1 * torch.randn(size, length, generator=g, dtype=torch.float64)
        scale = 8000.0 / wave.abs().amax(1, keepdim=True)
        weight = torch.randn(length // 4 + 1, generator=g, dtype=torch.float64)
        samples = array.array("h", (wave * scale).round().to(torch.int16).flatten().tolist())
        if sys.byteorder == "big":
            samples.byteswap()
        self._blob = samples.tobytes()
        self._y = (amp * weight[freq]).sum(1, keepdim=True).to(torch.float32)
        self._stride = 2 * length

    def __len__(self) -> int:
        return len(self._y)

    def __getitem__(self, index: int) -> tuple[bytes, torch.Tensor]:
        return self._blob[index * self._stride:(index + 1) * self._stride], self._y[index]


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


def decode(record: bytes) -> list[float]:
    """Little-endian int16 samples scaled to [-1, 1)."""
    return [int.from_bytes(record[i:i + 2], "little", signed=True) / 32768.0
            for i in range(0, len(record), 2)]


def spectral_features(record: bytes) -> torch.Tensor:
    """log(1 + power) of DFT bins 1..N_FREQS of the trace, normalised to zero mean, unit variance."""
    x = decode(record)
    n = len(x)
    mean = sum(x) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in x) / n) + 1e-8
    x = [(v - mean) / std for v in x]
    feats = []
    for k in range(1, N_FREQS + 1):
        re = im = 0.0
        for t, v in enumerate(x):
            angle = 2.0 * math.pi * k * t / n
            re += v * math.cos(angle)
            im -= v * math.sin(angle)
        feats.append(math.log1p((re * re + im * im) / n))
    return torch.tensor(feats, dtype=torch.float32)


class SpectralDataset(Dataset):
    """The records as model inputs: (spectral features, target)."""

    def __init__(self, records: Dataset):
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int):
        record, target = self.records[index]
        return spectral_features(record), target


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
    assert GLOBAL_BATCH % world_size == 0, "GLOBAL_BATCH must split evenly across ranks"
    batch_size = GLOBAL_BATCH // world_size

    torch.manual_seed(SEED)
    train_set = SensorRecords(DATASET_SIZE, TRACE_LEN, seed=SEED)
    sampler = DistributedSampler(train_set, shuffle=True, seed=SEED, drop_last=True)
    loader = DataLoader(SpectralDataset(train_set), batch_size=batch_size, sampler=sampler, drop_last=True)

    model = MLP(features=N_FREQS, hidden=WIDTH, targets=1, depth=DEPTH).to(device)
    raw_model = model
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)

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

            if master_process and step % LOG_INTERVAL == 0:
                dt = (time.time() - t0) / LOG_INTERVAL
                t0 = time.time()
                print(f"epoch {epoch} step {step:4d} | loss {loss.item():.5f} | {dt * 1000:.1f} ms/step | "
                      f"{GLOBAL_BATCH / dt:.0f} samples/s", flush=True)

    if master_process:
        os.makedirs(OUT_DIR, exist_ok=True)
        torch.save({"model": raw_model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
                   os.path.join(OUT_DIR, "ckpt.pt.tmp"))
        os.replace(os.path.join(OUT_DIR, "ckpt.pt.tmp"), os.path.join(OUT_DIR, "ckpt.pt"))
        print(f"done after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
