"""
Wide MLP regressor trained with DDP, with a cosine learning-rate schedule and a full training-state
checkpoint (model, optimizer, scheduler, step) every CKPT_INTERVAL steps, published to the artifact
store so that a preempted job can resume from it and evaluation jobs can pick it up.

Launch (one process per GPU, or per CPU core with gloo):

    torchrun --standalone --nproc-per-node 2 train.py
"""

import math
import os
import time
import urllib.request
import xml.etree.ElementTree as ET

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# -----------------------------------------------------------------------------
# data
DATASET_SIZE = 6400
FEATURES = 256
# optimisation
GLOBAL_BATCH = 32  # samples per optimizer step, summed over ranks
EPOCHS = 2
LEARNING_RATE = 1e-3
WEIGHT_DECAY = 0.01
# model
HIDDEN = 768
DEPTH = 4
# checkpoints and logging
CKPT_INTERVAL = 50  # optimizer steps between checkpoints
OUT_DIR = "out"
ARTIFACT_BUCKET = "checkpoints"  # the artifact store: an S3 bucket (endpoint from AWS_ENDPOINT_URL_S3)
KEEP_ARTIFACTS = 3  # checkpoints kept in the artifact store
LOG_INTERVAL = 10
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


class ObjectStore:
    """One bucket of an S3-compatible object store, over its REST API: what publishing checkpoints
    needs (put a file, list, delete). The endpoint comes from the environment, as for the AWS SDKs."""

    NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"

    def __init__(self, bucket: str, timeout: float = 600.0):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
        self.url = f"{endpoint.rstrip('/')}/{bucket}"
        self.timeout = timeout

    def _request(self, method, key="", query="", data=None, headers=None) -> bytes:
        req = urllib.request.Request(f"{self.url}/{key}{query}", data=data, method=method, headers=headers or {})
        with urllib.request.urlopen(req, timeout=self.timeout) as response:
            return response.read()

    def upload(self, path, key) -> None:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            self._request("PUT", key, data=f, headers={"Content-Length": str(size)})

    def list(self, prefix="") -> list:
        listing = self._request("GET", query=f"?list-type=2&prefix={prefix}")
        return sorted(k.text for k in ET.fromstring(listing).iter(self.NS + "Key"))

    def delete(self, key) -> None:
        self._request("DELETE", key)


def save_checkpoint(path, store, model, optimizer, scheduler, step) -> None:
    """Write the full training state atomically, then publish a copy to the artifact store."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "scheduler": scheduler.state_dict(), "step": step}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    torch.save(state, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    store.upload(path, f"ckpt-{step:06d}.pt")
    for old in store.list()[:-KEEP_ARTIFACTS]:
        store.delete(old)


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
    raw_model = model
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY,
                                  fused=True)
    total_steps = EPOCHS * len(loader)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps)
    ckpt_path = os.path.join(OUT_DIR, "ckpt.pt")
    store = ObjectStore(ARTIFACT_BUCKET)

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
            scheduler.step()
            step += 1

            if master_process and step % LOG_INTERVAL == 0:
                dt = (time.time() - t0) / LOG_INTERVAL
                t0 = time.time()
                print(f"epoch {epoch} step {step:4d} | loss {loss.item():.5f} | "
                      f"lr {scheduler.get_last_lr()[0]:.2e} | {dt * 1000:.1f} ms/step", flush=True)
            if master_process and step % CKPT_INTERVAL == 0:
                save_checkpoint(ckpt_path, store, raw_model, optimizer, scheduler, step)

    if master_process:
        print(f"done after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
