"""
Small causal language model trained with DDP on variable-length documents. Each optimizer step
sees GLOBAL_BATCH documents: every rank runs MICRO_BATCH documents at a time and accumulates
gradients, so the global batch stays the same whatever the number of GPUs.

Launch (one process per GPU, or per CPU core with gloo):

    torchrun --standalone --nproc-per-node 2 train.py
    torchrun --standalone --nproc-per-node 1 train.py   # the same global batch on one process
"""

import math
import os
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler

# -----------------------------------------------------------------------------
# data
NUM_DOCS = 2048
MIN_LEN = 4  # tokens per document, before padding
MAX_LEN = 48
VOCAB = 64
PAD = 0
# optimisation
GLOBAL_BATCH = 32  # documents per optimizer step, summed over ranks and micro-batches
MICRO_BATCH = 4  # documents per forward/backward pass on one rank
EPOCHS = 2
LEARNING_RATE = 3e-3
WARMUP_STEPS = 8
WEIGHT_DECAY = 0.1
GRAD_CLIP = 1.0
# model
D_MODEL = 64
N_LAYER = 2
N_HEAD = 4
# logging
LOG_INTERVAL = 8
SEED = 1337
# -----------------------------------------------------------------------------


class Documents(Dataset):
    """Token documents of varying length; each follows its own affine rule with noise."""

    def __init__(self, num_docs: int, seed: int):
        self.num_docs = num_docs
        self.seed = seed

    def __len__(self) -> int:
        return self.num_docs

    def __getitem__(self, i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 100_003 + i)
        n = int(torch.randint(MIN_LEN, MAX_LEN + 1, (), generator=g))
        step = int(torch.randint(1, 8, (), generator=g))
        start = torch.randint(1, VOCAB, (), generator=g)
        tokens = (start + step * torch.arange(n)) % (VOCAB - 1) + 1
        noise = torch.rand(n, generator=g) < 0.1
        tokens[noise] = torch.randint(1, VOCAB, (int(noise.sum()),), generator=g)
        return tokens


def collate(docs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad to the longest document; padded positions are not predicted (target -100)."""
    width = max(len(d) for d in docs)
    x = torch.full((len(docs), width - 1), PAD)
    y = torch.full((len(docs), width - 1), -100)
    for row, d in enumerate(docs):
        x[row, : len(d) - 1] = d[:-1]
        y[row, : len(d) - 1] = d[1:]
    return x, y


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d, bias=False), nn.GELU(), nn.Linear(4 * d, d, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, max_len: int, d: int, layers: int, heads: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln_f(h))


def lr_at(step: int, total: int) -> float:
    if step < WARMUP_STEPS:
        return LEARNING_RATE * (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, total - WARMUP_STEPS)
    return LEARNING_RATE * 0.5 * (1 + math.cos(math.pi * progress))


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
    assert GLOBAL_BATCH % (MICRO_BATCH * world_size) == 0, "GLOBAL_BATCH must split into micro-batches on every rank"
    accum_steps = GLOBAL_BATCH // (MICRO_BATCH * world_size)

    torch.manual_seed(SEED)
    train_set = Documents(NUM_DOCS, SEED)
    sampler = DistributedSampler(train_set, shuffle=True, seed=SEED, drop_last=True)
    loader = DataLoader(train_set, batch_size=MICRO_BATCH, sampler=sampler, drop_last=True, collate_fn=collate)

    model = TinyLM(VOCAB, MAX_LEN, D_MODEL, N_LAYER, N_HEAD).to(device)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    steps_per_epoch = len(loader) // accum_steps
    total_steps = EPOCHS * steps_per_epoch
    if master_process:
        print(f"world size {world_size}: {steps_per_epoch} steps per epoch, {accum_steps} micro-batches "
              f"of {MICRO_BATCH} documents per rank per step", flush=True)

    step = 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        batches = iter(loader)
        for _ in range(steps_per_epoch):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, total_steps)
            step_loss = 0.0
            for micro in range(accum_steps):
                x, y = next(batches)
                x, y = x.to(device), y.to(device)
                sync = micro == accum_steps - 1  # all-reduce the gradients once, after the last micro-batch
                with nullcontext() if sync else model.no_sync():
                    logits = model(x)
                    loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1), ignore_index=-100)
                    loss = loss / accum_steps
                    loss.backward()
                step_loss += loss.item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1

            if master_process and step % LOG_INTERVAL == 0:
                dt = (time.time() - t0) / LOG_INTERVAL
                t0 = time.time()
                print(f"epoch {epoch} step {step:4d} | loss {step_loss:.4f} | "
                      f"lr {optimizer.param_groups[0]['lr']:.2e} | {dt * 1000:.1f} ms/step", flush=True)

    if master_process:
        print(f"done after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
