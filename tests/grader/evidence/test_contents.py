"""What a checkpoint holds, recognised by content: the model by its structure, the optimizer,
scheduler and scaler by the layout torch gives their state dicts, the step by its value."""

from __future__ import annotations

import random

import torch
from torch import nn

from grader.evidence import contents


def _state():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    scaler = torch.amp.GradScaler("cpu")
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
    sched.step()
    final = {n: p.detach().clone() for n, p in model.named_parameters()}
    return model, opt, sched, scaler, final


def test_real_state_dicts_are_recognised_under_any_key():
    model, opt, sched, scaler, final = _state()
    ckpt = {"trainer": {"net": model.state_dict(), "adam": opt.state_dict(), "lr_sched": sched.state_dict(),
                        "amp": scaler.state_dict()},
            "global_step": 17, "rng": {"python": random.getstate(), "torch": torch.get_rng_state()}}
    assert contents.missing_state(ckpt, ["model", "optimizer", "scheduler", "scaler", "step"], final, [17, 18]) == []
    [(where, state)] = contents.model_states(ckpt, final)
    assert where == "trainer.net" and set(state) == set(final)


def test_what_is_missing_is_named():
    model, opt, _, _, final = _state()
    ckpt = {"model": model.state_dict(), "optimizer": opt.state_dict(), "iter": 3}
    assert contents.missing_state(ckpt, ["scheduler", "scaler", "step"], final, [17, 18]) == [
        "LR scheduler state", "loss-scaler state", "step count (no integer equal to the 17 steps done when it "
        "was written)"]


def test_an_optimizer_saved_without_its_per_parameter_state_is_hollow():
    _, opt, _, _, final = _state()
    sd = opt.state_dict()
    hollow = {"optimizer": {**sd, "state": {}}}
    [why] = contents.missing_state(hollow, ["optimizer"], final)
    assert "hollow" in why and "betas" in why


def test_a_model_with_buffers_matches_by_its_parameters():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    final = {n: p.detach().clone() for n, p in model.named_parameters()}
    [(_, state)] = contents.model_states({"m": model.state_dict()}, final)
    assert set(state) == set(final)


def test_a_value_is_found_under_any_key_within_tolerance():
    ckpt = {"metrics": {"val/loss": torch.tensor(0.25000001)}, "epoch": 2}
    assert contents.find_value(ckpt, 0.25) == "metrics.val/loss"
    assert contents.find_value(ckpt, 0.26) is None
