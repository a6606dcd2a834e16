"""
Small causal language model pre-trained with DDP in bfloat16. The weights, gradients and
activations are all bf16: half the memory of fp32, which is what let the longer context fit.

Launch (one process per GPU, or per CPU core with gloo):

    torchrun --standalone --nproc-per-node 2 train.py
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
NUM_SEQUENCES = 2048
BLOCK_SIZE = 32  # tokens of context per sequence
VOCAB = 64
# optimisation
GLOBAL_BATCH = 32  # sequences per optimizer step, summed over ranks
EPOCHS = 2
LEARNING_RATE = 1e-3
WARMUP_STEPS = 8
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)
GRAD_CLIP = 1.0
# model
D_MODEL = 64
N_LAYER = 2
N_HEAD = 4
DTYPE = torch.bfloat16
# logging
LOG_INTERVAL = 8
SEED = 1337
# -----------------------------------------------------------------------------


class Sequences(Dataset):
    """Token sequences of BLOCK_SIZE + 1 tokens; each follows its own affine rule with noise."""

    def __init__(self, num_sequences: int, seed: int):
        self.num_sequences = num_sequences
        self.seed = seed

    def __len__(self) -> int:
        return self.num_sequences

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 100_003 + i)
        step = int(torch.randint(1, 8, (), generator=g))
        start = torch.randint(1, VOCAB, (), generator=g)
        tokens = (start + step * torch.arange(BLOCK_SIZE + 1)) % (VOCAB - 1) + 1
        noise = torch.rand(BLOCK_SIZE + 1, generator=g) < 0.1
        tokens[noise] = torch.randint(1, VOCAB, (int(noise.sum()),), generator=g)
        return tokens[:-1], tokens[1:]


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
    def __init__(self, vocab: int, block_size: int, d: int, layers: int, heads: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(block_size, d)
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
    assert GLOBAL_BATCH % world_size == 0, "GLOBAL_BATCH must split evenly across ranks"

    torch.manual_seed(SEED)
    train_set = Sequences(NUM_SEQUENCES, SEED)
    sampler = DistributedSampler(train_set, shuffle=True, seed=SEED, drop_last=True)
    loader = DataLoader(train_set, batch_size=GLOBAL_BATCH // world_size, sampler=sampler, drop_last=True)

    model = TinyLM(VOCAB, BLOCK_SIZE, D_MODEL, N_LAYER, N_HEAD).to(device=device, dtype=DTYPE)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=BETAS, weight_decay=WEIGHT_DECAY)
    total_steps = EPOCHS * len(loader)
    if master_process:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"world size {world_size}: {n_params} parameters in {DTYPE}, {len(loader)} steps per epoch",
              flush=True)

    step = 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, total_steps)
            logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.view(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1

            if step % LOG_INTERVAL == 0:
                reported = loss.detach().clone()
                dist.all_reduce(reported)  # the mean over ranks: every rank's batch is the same size
                if master_process:
                    dt = (time.time() - t0) / LOG_INTERVAL
                    t0 = time.time()
                    print(f"epoch {epoch} step {step:4d} | loss {reported.item() / world_size:.4f} | "
                          f"lr {optimizer.param_groups[0]['lr']:.2e} | {dt * 1000:.1f} ms/step", flush=True)

    if master_process:
        print(f"done after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
