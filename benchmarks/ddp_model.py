"""ddp_bench's job in one place: the model, optimizer and batch every harness benchmark trains, so
the figures they give are about the same steps. The scripts beside it import it by name (the
script's folder is first on ``sys.path`` under torchrun and under ``trainwreck run`` alike)."""
from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

WIDTH, DEPTH, BATCH = 256, 8, 64


def build(device: torch.device) -> tuple[DDP, torch.optim.Optimizer, torch.Tensor]:
    """A DDP-wrapped stack of ``DEPTH`` linear+ReLU layers, its SGD optimizer and one input batch
    (seeded: every rank and every run starts from the same parameters)."""
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = DDP(torch.nn.Sequential(*layers).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    return model, opt, torch.randn(BATCH, WIDTH, device=device)
