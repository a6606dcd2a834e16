"""`calc precision` and `calc accumulation`: the rounding facts checked against torch's own bf16,
fp16 and fp32 arithmetic, the token weights against autograd, the optimizer factors against
torch.optim; and the commands' help, output and one-line errors."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from grader.commands.calc import command
from grader.tools import calc as C

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def run(*args: str, width: int | None = None):
    return CliRunner().invoke(command, list(args), terminal_width=width)


def run_json(*args: str) -> dict:
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def stored(value: float, dtype: str) -> torch.Tensor:
    return torch.tensor(value, dtype=DTYPES[dtype])


def rounded_sum(a: torch.Tensor, step: float) -> float:
    """a + step rounded once to a's dtype: the float64 sum is exact for the values used here."""
    return (a.double() + step).to(a.dtype).item()


# ----------------------------------------------------------------------------------------------
# precision: against torch


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("value", [1.0, 0.3, 3.0, 256.0, 1e-3, -2.0, 1.0078125, 6e-5])
def test_spacing_is_torchs_nextafter(dtype, value):
    t = stored(value, dtype)
    inf = torch.tensor(float("inf"), dtype=t.dtype)
    v = C.precision(dtype, value).values
    assert v["value_stored"] == t.item()
    assert v["spacing_up"] == torch.nextafter(t, inf).item() - t.item()
    assert v["spacing_down"] == t.item() - torch.nextafter(t, -inf).item()


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("value", [1.0, 0.3, 3.0, 1.0078125, -2.0])
def test_a_step_moves_the_value_only_above_half_the_spacing(dtype, value):
    t = stored(value, dtype)
    v = C.precision(dtype, value).values
    for direction, threshold, tie in ((1, v["step_threshold_up"], v["tie_moves_up"]),
                                      (-1, v["step_threshold_down"], v["tie_moves_down"])):
        assert rounded_sum(t, direction * threshold * 0.99) == t.item()        # below: stays
        assert rounded_sum(t, direction * threshold * 1.01) != t.item()        # above: moves
        assert (rounded_sum(t, direction * threshold) != t.item()) == bool(tie)  # the tie: to even
        step = C.precision(dtype, value, step=direction * threshold).values
        assert step["step_moves"] == tie and step["value_after_step"] == rounded_sum(t, direction * threshold)


def test_a_tie_goes_to_the_even_significand():
    # 1.0 has an even significand: the tie stays; 1.0078125 (1 + 2^-7) an odd one: the tie moves up
    assert C.precision("bf16", 1.0).values["tie_moves_up"] == 0.0
    assert C.precision("bf16", 1.0078125).values["tie_moves_up"] == 1.0
    assert rounded_sum(stored(1.0078125, "bf16"), 2**-8) == 1.015625


def test_bf16_weight_at_one_ignores_a_step_of_0_003_and_takes_0_004_as_torch_does():
    one = stored(1.0, "bf16")
    assert (one + 0.003).item() == 1.0 and (one + 0.004).item() == 1.0078125  # torch's own scalar path
    assert C.precision("bf16", 1.0, step=0.003).values["step_moves"] == 0.0
    after = C.precision("bf16", 1.0, step=0.004).values
    assert after["step_moves"] == 1.0 and after["value_after_step"] == 1.0078125
    assert C.precision("bf16", 1.0).values["step_threshold_up"] == 2**-8


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_running_sum_of_ones_stalls_where_torchs_does(dtype):
    total = torch.zeros((), dtype=DTYPES[dtype])
    one = torch.ones((), dtype=DTYPES[dtype])
    for _ in range(3000):
        total += one
    v = C.precision(dtype, 1.0, count=3000).values
    assert v["running_sum"] == total.item() == v["ones_sum_stalls_at"]
    assert v["ones_sum_stalls_at"] == 2 ** v["significand_bits"]
    assert v["running_sum_exact"] == 3000


def test_fp32_running_sum_of_ones_stalls_at_two_to_the_24():
    assert C.precision("fp32").values["ones_sum_stalls_at"] == 2**24
    below = torch.tensor(2**24 - 1, dtype=torch.float32)
    at = torch.tensor(2**24, dtype=torch.float32)
    assert (below + 1).item() == 2**24 and (at + 1).item() == 2**24


@pytest.mark.parametrize("dtype, value, count", [("bf16", 1.0, 1000), ("fp16", 0.1, 500), ("bf16", 0.01, 400),
                                                 ("fp16", 3.0, 2000)])
def test_running_sum_of_any_value_matches_torch(dtype, value, count):
    total = torch.zeros((), dtype=DTYPES[dtype])
    x = stored(value, dtype)
    for _ in range(count):
        total += x
    assert C.precision(dtype, value, count=count).values["running_sum"] == total.item()


def test_the_quiz_figures():
    v = C.precision("bf16", 1.0, count=1000).values
    assert v["running_sum"] == 256 and v["running_sum_stalls_at_addition"] == 257
    assert C.precision("fp16", 1.0).values["ones_sum_stalls_at"] == 2048
    assert C.precision("fp16", 1.0).values["step_threshold_up"] == 2**-11


# ----------------------------------------------------------------------------------------------
# accumulation: against autograd and torch.optim


def autograd_token_weights(counts: list[int], loss: str, divisor: float, world: int) -> list[float]:
    """Each part's token losses are parameters: the gradient on each is that token's weight."""
    weights = []
    for n in counts:
        token_losses = torch.ones(n, dtype=torch.float64, requires_grad=True)
        part = token_losses.mean() if loss == "mean" else token_losses.sum()
        (part / divisor).backward()
        assert token_losses.grad is not None
        g = token_losses.grad / world  # DDP's all-reduce divides the summed gradient by the world size
        assert torch.all(g == g[0])
        weights.append(g[0].item())
    return weights


@pytest.mark.parametrize("kwargs, loss, divisor, world", [
    ({"tokens": [100, 400]}, "mean", 2, 1),
    ({"tokens": [100, 400], "divide_by": "none"}, "mean", 1, 1),
    ({"tokens": [100, 400], "loss": "sum", "divide_by": "tokens"}, "sum", 500, 1),
    ({"rank_tokens": [1000, 1000, 1000, 5000]}, "mean", 1, 4),
    ({"rank_tokens": [1000, 1000, 1000, 5000], "loss": "sum", "divide_by": "tokens"}, "sum", 8000 / 4, 4),
])
def test_token_weights_are_autograds(kwargs, loss, divisor, world):
    counts = kwargs.get("tokens") or kwargs["rank_tokens"]
    label = "rank" if "rank_tokens" in kwargs else "microbatch"
    v = C.accumulation(**kwargs).values
    expected = autograd_token_weights(counts, loss, divisor, world)
    for i, w in enumerate(expected, start=1):
        assert v[f"token_weight_{label}_{i}"] == pytest.approx(w, rel=1e-12)
        assert v[f"token_weight_factor_{label}_{i}"] == pytest.approx(w * sum(counts), rel=1e-12)
    assert v["gradient_scale"] == pytest.approx(sum(n * w for n, w in zip(counts, expected)), rel=1e-12)


def test_summed_token_losses_over_the_step_weigh_every_token_alike():
    v = C.accumulation(tokens=[100, 400], loss="sum", divide_by="tokens").values
    assert v["token_weight_factor_microbatch_1"] == v["token_weight_factor_microbatch_2"] == 1
    v = C.accumulation(rank_tokens=[1000, 1000, 1000, 5000], loss="sum", divide_by="tokens").values
    assert v["token_weight_spread"] == 1 and v["token_weight_factor_rank_4"] == 1


def test_the_quiz_token_figures():
    v = C.accumulation(tokens=[100, 400]).values
    assert v["token_weight_factor_microbatch_1"] == 2.5 and v["token_weight_factor_microbatch_2"] == 0.625
    assert v["token_weight_spread"] == 4
    v = C.accumulation(rank_tokens=[1000, 1000, 1000, 5000]).values
    assert v["token_weight_factor_rank_4"] == 0.4 and v["token_weight_factor_rank_1"] == 2
    assert v["gradient_share_fraction_rank_4"] == 0.25 and v["token_share_fraction_rank_4"] == 0.625


def sgd_update(k: int, divide: bool, lr: float) -> float:
    """One SGD step after k micro-batches whose loss has gradient 1 each."""
    w = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))
    opt = torch.optim.SGD([w], lr=lr)
    for _ in range(k):
        (w * 1.0 / (k if divide else 1)).backward()
    opt.step()
    return -w.item()


def test_unscaled_accumulation_multiplies_sgds_lr_by_k():
    v = C.accumulation(accum=8, divide_by="none", lr=0.1).values
    assert v["gradient_scale"] == 8 and v["token_weight_factor"] == 8
    intended = sgd_update(8, divide=True, lr=0.1)
    assert v["effective_lr_sgd"] == pytest.approx(0.1 * sgd_update(8, divide=False, lr=0.1) / intended)
    assert C.accumulation(accum=8, lr=0.1).values["effective_lr_sgd"] == pytest.approx(0.1)


@pytest.mark.parametrize("eps_ratio", [0.0, 1e-5, 0.5, 3.0])
def test_adam_update_factor_is_torchs(eps_ratio):
    def update(scale: float) -> float:
        w = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))
        opt = torch.optim.Adam([w], lr=1e-3, eps=eps_ratio)  # the gradient entry is 1: eps = the ratio
        (w * scale).backward()
        opt.step()
        return -w.item()

    v = C.accumulation(accum=8, divide_by="none", adam_eps_ratio=eps_ratio).values
    assert v["adam_update_factor"] == pytest.approx(update(8.0) / update(1.0), rel=1e-9)


# ----------------------------------------------------------------------------------------------
# the commands


@pytest.mark.parametrize("args, key, expected", [
    (["precision", "--dtype", "bf16", "--value", "1.0"], "step_threshold_up", 0.00390625),
    (["precision", "--dtype", "bf16", "--count", "1000"], "running_sum", 256),
    (["precision", "--dtype", "bf16", "--step", "0.00390625"], "step_moves", 0),
    (["accumulation", "--tokens", "100,400"], "token_weight_factor_microbatch_1", 2.5),
    (["accumulation", "--rank-tokens", "1k,1k,1k,5k"], "token_weight_factor_rank_4", 0.4),
    (["accumulation", "--accum", "8", "--divide-by", "none", "--lr", "0.1"], "effective_lr_sgd", 0.8),
    (["accumulation", "--accum", "8", "--divide-by", "none"], "adam_update_factor", 1),
])
def test_cli_results(args, key, expected):
    assert run_json(*args)["result"][key] == pytest.approx(expected)


@pytest.mark.parametrize("args, message", [
    (["precision", "--dtype", "fp8"], "Invalid value for '--dtype'"),
    (["precision", "--dtype", "bf16", "--value", "1e40"], "overflows"),
    (["precision", "--dtype", "bf16", "--step", "0"], "step must be"),
    (["accumulation"], "give one of --tokens"),
    (["accumulation", "--tokens", "1,2", "--accum", "2"], "not --tokens and --accum"),
    (["accumulation", "--tokens", "100,-4"], "must be positive"),
    (["accumulation", "--tokens", "100,2.5"], "positive whole numbers"),
    (["accumulation", "--tokens", "100,lots"], "Invalid value for '--tokens'"),
    (["accumulation", "--rank-tokens", "5,5", "--divide-by", "accum"], "use none or tokens"),
])
def test_cli_errors_exit_2_with_one_line(args, message):
    r = run(*args)
    assert r.exit_code == 2
    error_lines = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1 and message in error_lines[0], r.output


@pytest.mark.parametrize("sub, formula, sources", [
    ("precision", "spaced 2^(e - m)", ("IEEE 754-2019", "Kalamkar")),
    ("accumulation", "sum_i n_i * weight_i", ("DistributedDataParallel", "Kingma & Ba")),
])
def test_help_states_formula_and_source_within_80_columns(sub, formula, sources):
    r = run(sub, "--help", width=80)
    assert r.exit_code == 0
    assert formula in r.output and all(s in r.output for s in sources)
    assert max(len(line) for line in r.output.splitlines()) <= 80


@pytest.mark.parametrize("args", [["precision", "--dtype", "bf16", "--step", "0.004", "--count", "300"],
                                  ["accumulation", "--tokens", "100,400", "--lr", "0.1"]])
def test_table_output_names_every_value(args):
    r = run(*args)
    assert r.exit_code == 0, r.output
    for key in run_json(*args)["result"]:
        assert key in r.output
    assert "formula:" in r.output and "source:" in r.output
