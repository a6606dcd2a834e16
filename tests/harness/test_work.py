"""The dtype each outermost forward call computes in (harness/work.py), read at the modules that
hold parameters: autocast's where it is on, else the weights'. Both ways to train in bf16 read the
same, wherever autocast is entered; what the backward pass reached is counted by rows."""

from types import SimpleNamespace

import pytest
import torch

from harness import work


@pytest.fixture
def counter(monkeypatch):
    for owner, name in [(torch.nn.Module, "__call__"), (torch.Tensor, "backward"),
                        (torch.autograd, "backward"), (torch.autograd, "grad")]:
        monkeypatch.setattr(owner, name, getattr(owner, name))  # put back after the test
    return work.install(SimpleNamespace(step_fields=[], exit_fields=[]))


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 16))


X = torch.zeros(2, 3, dtype=torch.long)


class AutocastInside(torch.nn.Module):
    """A model whose own forward enters autocast, under a wrapper (DDP's place) that holds none."""

    def __init__(self):
        super().__init__()
        self.body = _model()

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.body(x)


class Wrapper(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.module = inner

    def forward(self, x):
        return self.module(x)


def test_autocast_around_the_call_names_the_dtype_whatever_the_weights(counter):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _model()(X)
    assert counter.take()["compute"] == {"bfloat16": 1}


def test_autocast_entered_inside_the_models_forward_counts(counter):
    Wrapper(AutocastInside())(X)
    assert counter.take()["compute"] == {"bfloat16": 1}


def test_without_autocast_the_weights_name_it_and_a_cast_is_seen_at_the_next_call(counter):
    model = _model()
    model(X)
    model.to(torch.bfloat16)  # swaps each parameter's data in place: nothing cached may miss it
    model(X)
    assert counter.take()["compute"] == {"float32": 1, "bfloat16": 1}


def test_the_dtype_holding_most_elements_wins_over_norms_kept_in_fp32(counter):
    model = _model().to(torch.bfloat16)
    model[1].float()  # norm weights kept in fp32, as mixed-precision recipes do
    model[2].register_forward_pre_hook(lambda m, args: (args[0].to(torch.bfloat16),))
    model(X)
    assert counter.take()["compute"] == {"bfloat16": 1}


def test_a_bf16_call_the_backward_never_reaches_trains_nothing(counter):
    model, canary = _model(), torch.nn.Linear(8, 8).to(torch.bfloat16)
    with torch.no_grad():
        canary(torch.zeros(0, 8, dtype=torch.bfloat16))  # in bf16 on no rows, outside the graph
    model(X).float().sum().backward()
    step = counter.take()
    assert step["compute"] == {"bfloat16": 1, "float32": 1}
    assert step["backward_compute"] == {"float32": 2}
