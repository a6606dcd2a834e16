"""The capacity calculator: published worked examples, the formulas' limits, unit parsing, and the
command's output and one-line errors."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from grader.commands.calc import command
from grader.tools import calc as C
from grader.tools import units


def run(*args: str):
    return CliRunner().invoke(command, list(args))


def run_json(*args: str) -> dict:
    r = run(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


# Rajbhandari et al. 2020, Fig. 1: 7.5B parameters, K = 12, Nd = 64; the paper prints one decimal
@pytest.mark.parametrize("zero, per_device_gb", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure_1(zero, per_device_gb):
    r = C.memory(7.5e9, weights="fp16", zero=zero, dp=64)
    assert r.values["per_device_GB"] == pytest.approx(per_device_gb, abs=0.05)


@pytest.mark.parametrize("kwargs, bytes_per_param", [
    ({"weights": "fp16"}, 16),                                   # 2 + 2 + (4 master + 4 + 4)
    ({"weights": "fp32"}, 16),                                   # 4 + 4 + (no master + 4 + 4)
    ({"weights": "bf16", "master": False}, 12),                  # 2 + 2 + 8
    ({"weights": "bf16", "optimizer": "sgd-momentum"}, 12),      # 2 + 2 + (4 + 4)
    ({"weights": "bf16", "optimizer": "none"}, 4),               # weights and gradients only
    ({"weights": "bf16", "optimizer_dtype": "bf16", "master": False}, 8),
])
def test_bytes_per_param(kwargs, bytes_per_param):
    assert C.memory(1e9, **kwargs).values["bytes_per_param"] == bytes_per_param


def test_seven_billion_adam_is_112_gb_and_104_gib():
    v = C.memory(7e9, weights="fp16").values
    assert v["total_state_GB"] == pytest.approx(112.0)
    assert v["total_state_GiB"] == pytest.approx(112e9 / 2**30)


def test_model_parallel_and_fit():
    v = C.memory(70e9, tp=8, pp=4, device_memory=80e9).values
    assert v["per_device_GB"] == pytest.approx(35.0)
    assert v["fits"] == 1.0 and v["max_params"] == pytest.approx(80e9 / 16 * 32)


def test_activations_formulas_agree_without_parallelism():
    shape = dict(layers=40, hidden=5120, heads=40, seq_len=4096, micro_batch=1)
    plain = C.activation_bytes(**shape)
    assert plain == C.activation_bytes(**shape, sequence_parallel=True)  # t = 1: the same formula
    assert plain == 40 * 4096 * 5120 * (34 + 5 * 40 * 4096 / 5120)
    assert C.activation_bytes(**shape, recompute="full") == 40 * 2 * 4096 * 5120
    assert C.activation_bytes(**shape, tp=8, sequence_parallel=True, recompute="full") == 40 * 2 * 4096 * 5120
    assert C.activation_bytes(**shape, tp=8, sequence_parallel=True, recompute="selective") == \
        40 * 34 * 4096 * 5120 / 8


@pytest.mark.parametrize("n, sent_fraction", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (128, 2 * 127 / 128)])
def test_ring_allreduce_sends_two_n_minus_one_over_n(n, sent_fraction):
    assert C.allreduce(1e9, n).values["sent_per_device_bytes"] == pytest.approx(sent_fraction * 1e9)


def test_allreduce_time_counts_latency_per_step():
    v = C.allreduce(65536, 2, bandwidth=10e9, latency_s=50e-6, count=52).values
    assert v["time_s"] == pytest.approx(52 * (2 * 50e-6 + 65536 / 10e9))


@pytest.mark.parametrize("p, m, v, over_ideal, over_total", [
    (8, 32, 1, 7 / 32, 7 / 39),
    (4, 4, 1, 3 / 4, 3 / 7),
    (8, 32, 4, 7 / 128, 7 / 135),
    (1, 8, 1, 0.0, 0.0),
])
def test_bubble_both_definitions(p, m, v, over_ideal, over_total):
    r = C.bubble(p, m, v=v)
    assert r.values["bubble_over_ideal_fraction"] == pytest.approx(over_ideal)
    assert r.values["bubble_over_total_fraction"] == pytest.approx(over_total)


def test_bubble_min_microbatches_is_the_smallest_that_meets_the_target():
    m = int(C.bubble(8, 1, max_bubble=0.05).values["min_microbatches"])
    assert C.bubble(8, m).values["bubble_over_ideal_fraction"] <= 0.05
    assert C.bubble(8, m - 1).values["bubble_over_ideal_fraction"] > 0.05


def test_gpipe_holds_every_microbatch_1f1b_only_p():
    assert C.bubble(8, 32, schedule="gpipe").values["in_flight_microbatches"] == 32
    assert C.bubble(8, 32, schedule="1f1b").values["in_flight_microbatches"] == 8


def test_goyal_resnet50_linear_scaling_and_warmup():
    # Goyal et al. 2017: lr 0.1 per 256 images, 8192 images per step -> 3.2, warm-up over 5 epochs
    v = C.batch(32, 256, base_lr=0.1, base_batch=256, dataset_size=1281167, warmup_epochs=5, at_step=390).values
    assert v["global_batch"] == 8192 and v["lr"] == pytest.approx(3.2)
    assert v["steps_per_epoch"] == 156 and v["warmup_steps"] == 780
    assert v["lr_at_step"] == pytest.approx(0.1 + 3.1 * 390 / 780)


def test_batch_solves_accumulation_for_a_global_batch():
    assert C.batch(4, 32, global_batch=2048).values["accum"] == 16
    with pytest.raises(C.CalcError, match="not a multiple"):
        C.batch(4, 48, global_batch=2048)


def test_batch_counts_the_steps_a_bad_sample_skips():
    """A skip agreed by every rank loses the step when any of the global batch's samples is bad."""
    v = C.batch(32, 8, bad_rate=0.001).values
    assert v["skipped_share"] == pytest.approx(1 - 0.999 ** 256) == pytest.approx(0.2260, abs=1e-4)
    assert v["rank_bad_share"] == pytest.approx(1 - 0.999 ** 32)
    assert "skipped_share" not in C.batch(32, 8).values
    with pytest.raises(C.CalcError, match="bad-rate"):
        C.batch(32, 8, bad_rate=1.0)


def test_young_and_daly():
    c, m = 98.0, 86400.0
    assert C.young_interval(c, m) == pytest.approx(math.sqrt(2 * c * m))
    assert abs(C.daly_interval(c, m) - C.young_interval(c, m)) / C.young_interval(c, m) < 0.02
    assert C.daly_interval(100.0, 40.0) == 40.0  # C >= 2M: Daly's interval is the MTBF itself
    # Young's interval minimises the first-order waste
    t = C.young_interval(c, m)
    assert C.waste_fraction(t, c, m) < min(C.waste_fraction(t * 0.9, c, m), C.waste_fraction(t * 1.1, c, m))
    assert C.waste_fraction(t, c, m) == pytest.approx(math.sqrt(2 * c / m))


def test_compute_llama2_7b_implied_mfu():
    # Touvron et al. 2023 (Llama 2), Table 2: 7B on 2.0T tokens took 184,320 A100-80GB GPU-hours
    v = C.compute(7e9, 2e12, 312e12, gpu_hours=184320).values
    assert v["flops"] == pytest.approx(8.4e22) and v["mfu_fraction"] == pytest.approx(0.4057, abs=1e-4)
    back = C.compute(7e9, 2e12, 312e12, mfu=v["mfu_fraction"]).values
    assert back["gpu_hours"] == pytest.approx(184320)


@pytest.mark.parametrize("call, message", [
    (lambda: C.memory(0), "params must be positive"),
    (lambda: C.memory(1e9, zero=4), "zero stage 4 is unknown"),
    (lambda: C.memory(1e9, dp=1.5), "dp must be a positive whole number"),
    (lambda: C.memory(1e9, weights="fp64"), "'fp64' is not a precision"),
    (lambda: C.allreduce(1e9, 0), "n \\(devices\\) must be"),
    (lambda: C.bubble(4, 8, schedule="gpipe", v=2), "interleaving"),
    (lambda: C.bubble(4, 8, max_bubble=1.5), "max bubble"),
    (lambda: C.batch(4, 8, accum=2, global_batch=64), "not both"),
    (lambda: C.batch(4, 8, base_lr=0.1), "both --base-lr and --base-batch"),
    (lambda: C.batch(4, 8, warmup_epochs=1), "needs --dataset-size"),
    (lambda: C.checkpoint(1e9, 1e9, interval_s=60), "need a failure rate"),
    (lambda: C.compute(7e9, 2e12, 312e12), "give --mfu"),
    (lambda: C.compute(7e9, 2e12, 312e12, mfu=1.5), "MFU must be"),
])
def test_bad_inputs_are_one_line_errors(call, message):
    with pytest.raises(C.CalcError, match=message) as e:
        call()
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text, parse, expected", [
    ("14GB", units.parse_size, 14e9),
    ("13 GiB", units.parse_size, 13 * 2**30),
    ("64KiB", units.parse_size, 65536),
    ("400Gb", units.parse_size, 50e9),
    ("400Gbit/s", units.parse_rate, 50e9),
    ("400Gbps", units.parse_rate, 50e9),
    ("50GB/s", units.parse_rate, 50e9),
    ("5us", units.parse_duration, 5e-6),
    ("24h", units.parse_duration, 86400),
    ("7B", units.parse_count, 7e9),
    ("1.5T", units.parse_count, 1.5e12),
    ("40%", units.parse_fraction, 0.4),
])
def test_units_parse(text, parse, expected):
    assert parse(text) == pytest.approx(expected)


@pytest.mark.parametrize("text, parse, message", [
    ("14", units.parse_size, "has no unit"),
    ("14gb", units.parse_size, "unknown size unit"),
    ("14 parsecs", units.parse_size, "unknown size unit"),
    ("50GB", units.parse_rate, "per second"),
    ("0GB/s", units.parse_rate, "must be positive"),
    ("10", units.parse_duration, "time unit"),
    ("7X", units.parse_count, "a count takes"),
    ("150%", units.parse_fraction, "at most 100%"),
    ("lots", units.parse_size, "not a size"),
])
def test_units_refuse(text, parse, message):
    with pytest.raises(units.UnitError, match=message):
        parse(text)


@pytest.mark.parametrize("value, frm, to, expected", [
    (112, "GB", "GiB", 112e9 / 2**30),
    (400, "Gbit/s", "GB/s", 50),
    (90, "min", "h", 1.5),
    (17.95, "%", "fraction", 0.1795),
])
def test_units_convert(value, frm, to, expected):
    assert units.convert(value, frm, to) == pytest.approx(expected)


def test_units_do_not_convert_across_dimensions():
    with pytest.raises(units.UnitError, match="cannot express"):
        units.convert(1, "GB", "s")


@pytest.mark.parametrize("sub, formula, sources", [
    ("memory", "w/[dp if zero>=3]", ("Rajbhandari", "Korthikanti")),
    ("allreduce", "2(n-1)/n", ("Patarasuk", "nccl-tests")),
    ("bubble", "(p-1)/(v*m)", ("Narayanan", "GPipe")),
    ("batch", "micro-batch * accumulation", ("Goyal", "Hoffer", "Krizhevsky")),
    ("checkpoint", "sqrt(2 * C * MTBF)", ("Young", "Daly")),
    ("compute", "6 * N * D", ("Kaplan", "PaLM")),
])
def test_every_subcommand_states_formula_and_source(sub, formula, sources):
    r = run(sub, "--help")
    assert r.exit_code == 0
    assert formula in r.output and all(s in r.output for s in sources)


def test_json_has_inputs_formula_source_and_result():
    out = run_json("memory", "--params", "7B", "--weights", "fp16")
    assert set(out) == {"calculator", "inputs", "formula", "source", "result", "notes"}
    assert out["result"]["total_state_GB"] == pytest.approx(112.0)
    assert "Rajbhandari" in out["source"] and any("excluded" in n for n in out["notes"])


@pytest.mark.parametrize("args, key, expected", [
    (["allreduce", "--params", "7e9", "--dtype", "bf16", "--n", "8"], "sent_per_device_GB", 24.5),
    (["allreduce", "--size", "14GB", "--n", "128", "--bandwidth", "400Gbit/s"], "time_s", 2 * 127 / 128 * 14 / 50),
    (["bubble", "--p", "8", "--m", "32", "--schedule", "gpipe"], "bubble_over_total_fraction", 7 / 39),
    (["batch", "--micro-batch", "4", "--dp", "64", "--accum", "8", "--seq-len", "4096"], "tokens_per_step", 8388608),
    (["checkpoint", "--params", "70B", "--bandwidth", "10GB/s"], "write_s", 98.0),
    (["checkpoint", "--size", "1TB", "--bandwidth", "1GB/s", "--node-mtbf", "8760h", "--nodes", "512"], "mtbf_h",
     8760 / 512),
    (["compute", "--params", "7B", "--tokens", "2T", "--peak-tflops", "312", "--mfu", "40%", "--devices", "1024"],
     "wall_clock_h", 8.4e22 / (312e12 * 0.4) / 3600 / 1024),
])
def test_cli_results(args, key, expected):
    assert run_json(*args)["result"][key] == pytest.approx(expected)


@pytest.mark.parametrize("args, message", [
    (["memory", "--params", "7B", "--layers", "40"], "missing --hidden"),
    (["allreduce", "--n", "8"], "give --size, or --params with --dtype"),
    (["allreduce", "--size", "14", "--n", "8"], "has no unit"),
    (["allreduce", "--params", "7B", "--n", "8"], "--params and --dtype go together"),
    (["checkpoint", "--size", "1TB", "--bandwidth", "1GB/s", "--nodes", "4"], "go together"),
    (["checkpoint", "--bandwidth", "1GB/s"], "give --size, or --params"),
    (["batch", "--micro-batch", "4", "--dp", "48", "--global-batch", "2048"], "not a multiple"),
    (["compute", "--params", "7B", "--tokens", "2T", "--peak-tflops", "312"], "give --mfu"),
])
def test_cli_errors_exit_2_with_one_line(args, message):
    r = run(*args)
    assert r.exit_code == 2
    error_lines = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1 and message in error_lines[0]


def test_calculator_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, grader.tools.calc, grader.tools.units, grader.commands.calc; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
