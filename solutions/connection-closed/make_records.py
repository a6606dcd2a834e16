"""
Writes exercises/connection-closed/data/bearings.pt, the fleet export the exercise trains on (kit
side: not shipped to candidates). Each record holds FEATURES band energies of one bearing's
accelerometers and its remaining life in log hours, a linear wear signature of the energies plus
noise; in DROPOUT_RATE of the records one channel dropped out and reads NaN, its true value lost.

    python solutions/connection-closed/make_records.py

tests/exercises/test_connection_closed_data.py holds the shipped file to this script's output.
"""

import math
import sys
from pathlib import Path

import torch

NUM_RECORDS = 4096
FEATURES = 32
DROPOUT_RATE = 0.002
SEED = 1337
OUT = Path(__file__).resolve().parents[2] / "exercises" / "connection-closed" / "data" / "bearings.pt"


def records() -> dict[str, torch.Tensor]:
    wear = torch.randn(FEATURES, generator=torch.Generator().manual_seed(SEED)) / math.sqrt(FEATURES)
    features = torch.empty(NUM_RECORDS, FEATURES)
    life = torch.empty(NUM_RECORDS, 1)
    for i in range(NUM_RECORDS):
        g = torch.Generator().manual_seed(SEED * 100_003 + i)
        x = torch.randn(FEATURES, generator=g)
        life[i] = x @ wear + 0.05 * torch.randn((), generator=g)
        if torch.rand((), generator=g) < DROPOUT_RATE:
            x[torch.randint(0, FEATURES, (), generator=g)] = float("nan")
        features[i] = x
    return {"features": features, "life": life}


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    torch.save(records(), tmp)
    tmp.replace(out)
    print(f"wrote {out}")
