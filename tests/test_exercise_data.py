"""Data shipped in an exercise folder is what the kit's generator writes, never an edited file:
connection-closed's fleet export (its generator, kept out of the candidate's workspace in
solutions/, knows the readings the dropped channels hid)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


def test_the_bearing_records_are_the_generators():
    spec = importlib.util.spec_from_file_location("make_records", REPO / "solutions/connection-closed/make_records.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    shipped = torch.load(gen.OUT)
    made = gen.records()
    assert shipped.keys() == made.keys()
    for k in made:
        # bit for bit, NaN where the generator dropped a channel
        assert torch.equal(shipped[k].view(torch.int32), made[k].view(torch.int32)), k
    bad = int(torch.isnan(shipped["features"]).any(1).sum())
    assert bad == 10 and not torch.isnan(shipped["life"]).any()
