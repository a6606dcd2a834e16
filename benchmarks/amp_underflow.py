"""Why amp-no-scaler's fp16 run stops learning: the exercise's own data and model (imported from its
train.py), trained in one process with its batch, optimizer and clipping in three modes: fp32, fp16
autocast without a loss scale (the broken script) and fp16 autocast with a GradScaler (the fix).
Every 64 steps: the loss over the whole dataset, and the share of the first layer's weight
gradient that is exactly zero at that step.

    python benchmarks/amp_underflow.py [--steps 384]

One process, so the batches are not the 2-rank job's; the mechanism is the same (the underflow
happens inside each rank's fp16 backward, before DDP's all-reduce).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch
import torch.nn.functional as F

EXERCISE = Path(__file__).resolve().parent.parent / "exercises" / "amp-no-scaler" / "train.py"


def _script():
    spec = importlib.util.spec_from_file_location("amp_no_scaler_train", EXERCISE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(s, mode: str, steps: int) -> list[tuple[int, float, float]]:
    data = s.DailyReturns(s.DATASET_SIZE, s.FEATURES, s.DAILY_VOL, seed=s.SEED)
    model = s.MLP(s.FEATURES, s.HIDDEN, 1, s.DEPTH)
    opt = torch.optim.AdamW(model.parameters(), lr=s.LEARNING_RATE, weight_decay=s.WEIGHT_DECAY)
    scaler = torch.amp.GradScaler("cpu", enabled=mode == "fp16+scaler")
    g = torch.Generator().manual_seed(s.SEED)
    bs, n, out = s.GLOBAL_BATCH, len(data), []
    perm = torch.randperm(n, generator=g)
    for step in range(1, steps + 1):
        at = ((step - 1) * bs) % n
        if at == 0:
            perm = torch.randperm(n, generator=g)
        idx = perm[at:at + bs]
        with torch.autocast("cpu", dtype=torch.float16, enabled=mode != "fp32"):
            loss = F.mse_loss(model(data.x[idx]), data.y[idx])
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), s.MAX_GRAD_NORM)
        grad = model.net[0].weight.grad
        zero = 1.0 if grad is None else (grad == 0).float().mean().item()
        scaler.step(opt)
        scaler.update()
        if step % 64 == 0:
            with torch.no_grad():
                out.append((step, F.mse_loss(model(data.x), data.y).item(), zero))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=384)
    args = ap.parse_args()
    torch.set_num_threads(1)
    s = _script()
    rows = {mode: run(s, mode, args.steps) for mode in ("fp32", "fp16", "fp16+scaler")}
    print("step  " + "  ".join(f"{m:>22}" for m in rows))
    for i, (step, _, _) in enumerate(rows["fp32"]):
        print(f"{step:4d}  " + "  ".join(f"loss {rows[m][i][1]:.1e} zero {rows[m][i][2]:4.0%}" for m in rows))


if __name__ == "__main__":
    main()
