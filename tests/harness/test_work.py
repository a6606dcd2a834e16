"""The dtype each outermost forward call computes in (harness/work.py): autocast's where it is on,
else the weights'. Both ways to train in bf16 must read the same."""

import torch

from harness.work import WorkCounter


def _compute_of(model: torch.nn.Module, x: torch.Tensor, autocast: torch.dtype | None = None) -> dict[str, int]:
    w = WorkCounter()
    if autocast is None:
        w.outermost(model, (x,), {})
    else:
        with torch.autocast("cpu", dtype=autocast):
            w.outermost(model, (x,), {})
    return w.take()["compute"]


def _model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 16))


def test_autocast_names_the_compute_dtype_whatever_the_weights():
    x = torch.zeros(2, 3, dtype=torch.long)
    assert _compute_of(_model(), x, autocast=torch.bfloat16) == {"bfloat16": 1}


def test_without_autocast_the_weights_name_it_and_a_cast_is_seen_at_the_next_call():
    model, x = _model(), torch.zeros(2, 3, dtype=torch.long)
    assert _compute_of(model, x) == {"float32": 1}
    model.to(torch.bfloat16)  # swaps each parameter's data in place: nothing cached may miss it
    assert _compute_of(model, x) == {"bfloat16": 1}


def test_the_dtype_holding_most_elements_wins_over_a_few_kept_in_fp32():
    model = _model().to(torch.bfloat16)
    model[1].float()  # norm weights kept in fp32, as mixed-precision recipes do
    assert _compute_of(model, torch.zeros(1, 3, dtype=torch.long)) == {"bfloat16": 1}
