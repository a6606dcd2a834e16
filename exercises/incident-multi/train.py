"""
Tiny causal transformer trained with DDP on a synthetic token stream. The log shows a held-out
loss estimate every few steps; at the end every rank scores its shard of the test split, and the
final checkpoint (with the test loss) is written for the evaluation pipeline to pick up.

Launch (one process per GPU, or per CPU core with gloo):

    torchrun --standalone --nproc-per-node 2 train.py
"""

import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

# -----------------------------------------------------------------------------
# data
DATASET_SIZE = 1024
VAL_SIZE = 256
TEST_SIZE = 256
SEQ_LEN = 32
VOCAB = 64
# optimisation
GLOBAL_BATCH = 32  # sequences per optimizer step, summed over ranks
EPOCHS = 4
LEARNING_RATE = 1e-3
WARMUP_STEPS = 10
# model
D_MODEL = 64
N_LAYER = 2
N_HEAD = 4
# evaluation and logging
EVAL_INTERVAL = 4  # steps between held-out loss estimates
EVAL_BATCH = 32  # sequences per estimate, per rank
LOG_INTERVAL = 8
OUT_DIR = "out"
SEED = 1337
# -----------------------------------------------------------------------------


class SyntheticTokens(Dataset):
    """Token sequences from a fixed random bigram chain, generated from a seed: next-token
    prediction has real signal."""

    def __init__(self, size: int, seq_len: int = 32, vocab: int = 64, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        probs = torch.softmax(torch.randn(vocab, vocab, generator=g) * 3, dim=-1)
        seqs = torch.empty(size, seq_len + 1, dtype=torch.long)
        seqs[:, 0] = torch.randint(vocab, (size,), generator=g)
        for t in range(seq_len):
            seqs[:, t + 1] = torch.multinomial(probs[seqs[:, t]], 1, generator=g).squeeze(1)
        self.seqs = seqs

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        s = self.seqs[index]
        return s[:-1], s[1:]


class Block(nn.Module):
    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, n_head, batch_first=True)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    """A small causal decoder. The initial weights come from ``seed`` alone, whatever else has
    drawn from the global RNG before."""

    def __init__(self, vocab: int = 64, seq_len: int = 32, d_model: int = 64, n_layer: int = 2,
                 n_head: int = 4, seed: int = 0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.tok = nn.Embedding(vocab, d_model)
            self.pos = nn.Embedding(seq_len, d_model)
            self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.full((seq_len, seq_len), float("-inf")), 1),
                             persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x, self.mask[:t, :t])
        return self.head(self.ln_f(x))


def lr_at(step: int, total: int) -> float:
    if step < WARMUP_STEPS:
        return LEARNING_RATE * (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, total - WARMUP_STEPS)
    return LEARNING_RATE * 0.5 * (1 + math.cos(math.pi * progress))


def token_loss(model, x, y, reduction="mean"):
    logits = model(x)
    return F.cross_entropy(logits.view(-1, VOCAB), y.view(-1), reduction=reduction)


@torch.no_grad()
def evaluate(model, loader, device) -> torch.Tensor:
    """Summed token loss and token count over this rank's shard."""
    model.eval()
    totals = torch.zeros(2, device=device)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        totals[0] += token_loss(model, x, y, reduction="sum")
        totals[1] += y.numel()
    model.train()
    return totals


def save_final_checkpoint(path, model, optimizer, step, test_totals) -> float:
    """Combine every rank's test-set totals into the test loss and write the checkpoint atomically."""
    dist.all_reduce(test_totals)
    test_loss = (test_totals[0] / test_totals[1]).item()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
             "test_loss": test_loss, "test_tokens": int(test_totals[1].item())}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
    return test_loss


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
    # one corpus, split three ways
    corpus = dict(size=DATASET_SIZE + VAL_SIZE + TEST_SIZE, seq_len=SEQ_LEN, vocab=VOCAB, seed=SEED)
    val_end = DATASET_SIZE + VAL_SIZE
    train_set = Subset(SyntheticTokens(**corpus), range(DATASET_SIZE))
    val_set = Subset(SyntheticTokens(**corpus), range(DATASET_SIZE, val_end))
    test_set = Subset(SyntheticTokens(**corpus), range(val_end, val_end + TEST_SIZE))
    sampler = DistributedSampler(train_set, shuffle=True, seed=SEED, drop_last=True)
    loader = DataLoader(train_set, batch_size=batch_size, sampler=sampler, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=EVAL_BATCH, sampler=DistributedSampler(val_set, shuffle=False))
    test_loader = DataLoader(test_set, batch_size=64, sampler=DistributedSampler(test_set, shuffle=False))

    model = TinyTransformer(VOCAB, SEQ_LEN, D_MODEL, N_LAYER, N_HEAD).to(device)
    raw_model = model
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.1)
    total_steps = EPOCHS * len(loader)

    metrics = {"train_loss": [], "val_loss": []}
    if master_process:  # one line per held-out estimate, as it happens
        os.makedirs(OUT_DIR, exist_ok=True)
        metrics_log = open(os.path.join(OUT_DIR, "metrics.jsonl"), "w", buffering=1)
    val_iter = iter(val_loader)
    step = 0
    t0 = time.time()
    for epoch in range(EPOCHS):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, total_steps)
            loss = token_loss(model, x, y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            metrics["train_loss"].append(loss.item())

            if step % EVAL_INTERVAL == 0:
                try:
                    xv, yv = next(val_iter)
                except StopIteration:
                    val_iter = iter(val_loader)
                    xv, yv = next(val_iter)
                metrics["val_loss"].append(token_loss(raw_model, xv.to(device), yv.to(device)))
                if master_process:
                    metrics_log.write(json.dumps({"step": step, "val_loss": float(metrics["val_loss"][-1])}) + "\n")

            if master_process and step % LOG_INTERVAL == 0:
                val = torch.stack(metrics["val_loss"][-4:]).mean().item()
                dt = (time.time() - t0) / LOG_INTERVAL
                t0 = time.time()
                print(f"epoch {epoch} step {step:4d} | loss {loss.item():.4f} | val {val:.4f} | "
                      f"lr {optimizer.param_groups[0]['lr']:.2e} | {dt * 1000:.1f} ms/step", flush=True)

    test_totals = evaluate(raw_model, test_loader, device)
    if master_process:
        ckpt_path = os.path.join(OUT_DIR, "ckpt.pt")
        test_loss = save_final_checkpoint(ckpt_path, raw_model, optimizer, step, test_totals)
        with open(os.path.join(OUT_DIR, "metrics.json"), "w") as f:
            json.dump({"steps": step, "train_loss": metrics["train_loss"],
                       "val_loss": [v.item() for v in metrics["val_loss"]], "test_loss": test_loss}, f)
        print(f"done after {step} steps | test loss {test_loss:.4f} | saved {ckpt_path}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
