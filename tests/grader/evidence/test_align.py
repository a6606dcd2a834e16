"""Parameters matched by the model's structure: whatever wrapper or attribute names a candidate's
script gives them, the same model pairs up, and a different model never does."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from grader.evidence.align import align
from grader.evidence.params import compare


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))


class Lit(nn.Module):
    """A Lightning-style wrapper that owns its model and its loss."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.model = net
        self.loss_fn = nn.MSELoss()


class Renamed(nn.Module):
    def __init__(self, net: nn.Sequential):
        super().__init__()
        self.inp, self.hidden, self.out = net[0], net[2], net[4]


def params(m: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in m.named_parameters()}


def grouped(m: nn.Module) -> dict[str, torch.Tensor]:
    """In the order an optimizer with two parameter groups (weights with decay, biases without) holds them."""
    ps = params(m)
    return {**{n: t for n, t in ps.items() if t.dim() > 1}, **{n: t for n, t in ps.items() if t.dim() == 1}}


@pytest.mark.parametrize("how, build, matched_by", [
    ("the same names", lambda: params(mlp()), "names"),
    ("under DDP's and torch.compile's wrappers", lambda: {f"module._orig_mod.{n}": t for n, t in params(mlp()).items()},
     "names"),
    ("wrapped in a LitModel", lambda: params(Lit(mlp())), "relative names"),
    ("a LitModel under DDP", lambda: {f"module.{n}": t for n, t in params(Lit(mlp())).items()}, "relative names"),
    ("attributes renamed", lambda: params(Renamed(mlp())), "structure"),
    ("optimizer parameter groups split by kind", lambda: grouped(Renamed(mlp())), "structure"),
])
def test_the_same_model_pairs_whatever_its_names(how, build, matched_by):
    ref = params(mlp())
    al = align(build(), ref)
    assert al.ok and al.how == matched_by, (how, al)
    cmp = compare(build(), ref, rtol=0.0, atol=0.0)
    assert cmp["close"] and cmp["max_abs_diff"] == 0.0 and cmp["matched_by"] == matched_by, (how, cmp)


def test_a_different_model_never_pairs():
    other = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    cmp = compare(params(other), params(mlp()), rtol=1e-5, atol=1e-6)
    assert not cmp["close"] and not cmp["same_structure"]
    assert "differ in structure" in cmp["problem"] and "[16, 4]" in cmp["problem"], cmp


def test_a_missing_layer_never_pairs():
    ref = params(mlp())
    fewer = dict(list(ref.items())[:-1])
    assert not align(fewer, ref).ok


def test_structure_still_compares_values():
    """Pairing by structure never makes different weights equal: a change of one element shows."""
    ref = params(mlp())
    mine = params(Renamed(mlp()))
    mine["hidden.weight"][0, 0] += 1e-3
    cmp = compare(mine, ref, rtol=1e-5, atol=1e-6)
    assert not cmp["close"] and cmp["worst_param"] == "2.weight", cmp


def test_same_shaped_layers_pair_in_the_order_the_model_holds_them():
    torch.manual_seed(1)
    m = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8))
    ref = params(m)
    renamed = {f"layer{i}.{k}": t for i, (n, t) in enumerate(ref.items()) for k in [n.split(".")[-1]]}
    cmp = compare(renamed, ref, rtol=0.0, atol=0.0)
    assert cmp["close"] and cmp["matched_by"] == "structure", cmp


def test_a_relative_tolerance_judges_each_tensor_as_a_whole():
    """fp16 on the wire moves single elements more than the tensor: per-tensor norms decide."""
    ref = params(mlp())
    mine = {n: t + 1e-3 * t.abs().max() * (torch.rand_like(t) - 0.5) for n, t in ref.items()}
    assert not compare(mine, ref, rtol=1e-5, atol=1e-6)["close"]
    cmp = compare(mine, ref, rtol=0.0, atol=0.0, max_rel=0.01)
    assert cmp["close"] and 0 < cmp["max_tensor_rel_diff"] < 0.01, cmp
    mine["4.bias"] = mine["4.bias"] * 2
    cmp = compare(mine, ref, rtol=0.0, atol=0.0, max_rel=0.01)
    assert not cmp["close"] and cmp["worst_rel_param"] == "4.bias", cmp
