"""
Bearing-wear regressor: an MLP over condition-monitoring features of raw vibration traces, trained
data-parallel. Each record is a triaxial accelerometer trace as the sensors store it (interleaved
int16 samples); the model sees, per axis, the log Welch power spectrum of the normalised trace and
its RMS, kurtosis and crest factor.

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
TRACE_LEN = 256  # samples per axis per record
AXES = 3  # accelerometer axes, interleaved in each record
N_FFT = 64  # Welch segment length (half-overlapping Hann windows)
N_FREQS = 32  # spectrum bins 1..N_FREQS per axis are model inputs
N_FEATURES = AXES * (N_FREQS + 3)  # plus log RMS, kurtosis and crest factor per axis
# optimisation
GLOBAL_BATCH = 512  # samples per optimizer step, summed over ranks
EPOCHS = 2
LEARNING_RATE = 1e-3
# model
WIDTH = 256
DEPTH = 4
# logging and checkpoints
LOG_INTERVAL = 8
OUT_DIR = "out"
SEED = 1337
# -----------------------------------------------------------------------------


class SensorRecords(Dataset):
    """Raw sensor traces as stored: each item is ``(record, target)``, the record ``length`` frames of
    ``axes`` little-endian int16 samples as ``bytes`` (a few harmonics of the shaft speed per axis
    plus noise, as a sensor stores them), the target a fixed function of which harmonics are present
    and how loud."""

    def __init__(self, size: int, length: int = 256, axes: int = 3, tones: int = 3, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        t = torch.arange(length, dtype=torch.float64)
        harmonic = torch.randint(1, 17, (size, axes, tones), generator=g)
        freq = harmonic * (length // 64)  # the shaft turns length // 64 times per trace
        amp = torch.rand(size, axes, tones, generator=g, dtype=torch.float64) + 0.2
        phase = torch.rand(size, axes, tones, 1, generator=g, dtype=torch.float64) * 2 * math.pi
        wave = (amp[..., None] * torch.sin(2 * math.pi * freq[..., None] * t / length + phase)).sum(2)
        wave = wave + 0.1 * torch.randn(size, axes, length, generator=g, dtype=torch.float64)
        scale = 8000.0 / wave.abs().amax(2, keepdim=True)
        weight = torch.randn(axes, 17, generator=g, dtype=torch.float64)
        frames = (wave * scale).round().to(torch.int16).transpose(1, 2)  # [size, length, axes]
        samples = array.array("h", frames.flatten().tolist())
        if sys.byteorder == "big":
            samples.byteswap()
        self._blob = samples.tobytes()
        wear = (amp * weight[torch.arange(axes)[:, None], harmonic]).sum((1, 2)) / axes
        self._y = wear[:, None].to(torch.float32)
        self._stride = 2 * length * axes

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


def axis_features(trace: torch.Tensor) -> torch.Tensor:
    """Features of one axis's trace (float64): log(1 + Welch power) in bins 1..N_FREQS of the
    trace normalised to zero mean and unit variance, then the log of its RMS, kurtosis and crest
    factor."""
    x = trace - trace.mean(dim=-1, keepdim=True)
    rms = x.square().mean(dim=-1, keepdim=True).sqrt()
    x = x / (rms + 1e-8)
    kurtosis = x.pow(4).mean(dim=-1, keepdim=True)
    crest = x.abs().amax(dim=-1, keepdim=True)
    window = torch.hann_window(N_FFT, dtype=x.dtype, device=x.device)
    segments = torch.stft(x, N_FFT, hop_length=N_FFT // 2, window=window, center=False, return_complex=True)
    power = segments.abs().square().mean(dim=-1)
    stats = torch.cat([rms, kurtosis, crest], dim=-1)
    return torch.cat([torch.log1p(power[..., 1:N_FREQS + 1]), torch.log(stats)], dim=-1)


class SpectralCollate:
    """Turns a batch of raw records into model inputs in one go: the whole batch decoded from one
    buffer, then every axis of every record through ``axis_features`` as one [records x axes, time]
    batch. float64 until the final cast, as the per-record version computes it."""

    def __call__(self, batch):
        records, targets = zip(*batch)
        raw = torch.frombuffer(bytearray(b"".join(records)), dtype=torch.int16)
        samples = raw.view(len(records), TRACE_LEN, AXES).to(torch.float64) / 32768.0
        traces = samples.transpose(1, 2).reshape(len(records) * AXES, TRACE_LEN)
        feats = axis_features(traces).view(len(records), -1).to(torch.float32)
        return feats, torch.stack(targets)


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
    train_set = SensorRecords(DATASET_SIZE, TRACE_LEN, AXES, seed=SEED)
    sampler = DistributedSampler(train_set, shuffle=True, seed=SEED, drop_last=True)
    # Records are read through the dataset every epoch (it streams from storage in production);
    # decoding and the features run once per batch, vectorised, instead of once per record.
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, drop_last=True,
                        collate_fn=SpectralCollate(), pin_memory=device.type == "cuda")

    model = MLP(features=N_FEATURES, hidden=WIDTH, targets=1, depth=DEPTH).to(device)
    raw_model = model
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)

    step = 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
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
