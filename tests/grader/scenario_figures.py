"""The worked figures of each design scenario, recomputed from its data files with ``grader.calc``.

Each ``<scenario>(root)`` returns ``{name: text}``: the figure as the brief, the constraints or the
interviewer's notes print it. ``test_scenarios.py`` asserts every text appears where it is quoted,
so a figure in the kit cannot drift from the data it is derived from. Run this file to print them.
"""

from __future__ import annotations

import csv
import math
import tomllib
from pathlib import Path

from grader import calc as C

HOURS_PER_MONTH = 730  # the cloud providers' billing month (8,760 h / 12)


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def toml(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def usd(x: float) -> str:
    return f"${x:,.0f}"


def num(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


# ---- (a) llm-architecture -------------------------------------------------------------------------

def llm_architecture(root: Path) -> dict[str, str]:
    d = root / "exercises" / "llm-architecture" / "data"
    model = toml(d / "model.toml")
    hw = {r["accelerator"]: r for r in rows(d / "hardware.csv")}
    opts = {r["option"]: r for r in rows(d / "options.csv")}
    bench = {r["id"]: r for r in rows(d / "benchmarks.csv")}
    rel = toml(d / "reliability.toml")
    n, tokens = model["params"], model["tokens"]
    peak = {k: float(v["bf16_dense_tflops"]) * 1e12 for k, v in hw.items()}

    pilot = bench["pilot-7b"]
    mfu_h100 = 6 * float(pilot["model_params"]) * float(pilot["tokens_per_s_per_device"]) / peak["H100-SXM5-80GB"]
    a100_pilot = bench["pilot-1.3b"]
    mfu_a100 = 6 * float(a100_pilot["model_params"]) * float(a100_pilot["tokens_per_s_per_device"]) / peak["A100-SXM4-80GB"]
    h100 = C.compute(n, tokens, peak["H100-SXM5-80GB"], mfu=mfu_h100).values
    a100 = C.compute(n, tokens, peak["A100-SXM4-40GB"], mfu=mfu_a100).values
    v5p = C.compute(n, tokens, peak["TPU-v5p"], mfu=mfu_a100).values  # untested: the A100 pilot's MFU assumed
    at35 = C.compute(n, tokens, peak["H100-SXM5-80GB"], mfu=0.35).values

    per_gpu_mtbf_h = rel["failures"]["days"] * 24 * rel["failures"]["gpus"] / rel["failures"]["unexpected_interruptions"]
    ckpt_bytes = n * sum(v for k, v in C.state_bytes_per_param("bf16", None, "adam", True).items() if k != "grads")
    write_bw = rel["storage"]["arcadia_shared_fs"]["aggregate_write_GBps"] * 1e9
    restart_s = rel["restart"]["minutes"] * 60
    train_days_available = (10 - int(opts["arcadia-h100"]["lead_time_weeks"]) - 1) * 7  # deadline - lead - validation

    def arcadia(nodes: int, gpu_hours: float) -> dict[str, float]:
        g = nodes * int(opts["arcadia-h100"]["accelerators_per_node"])
        ck = C.checkpoint(ckpt_bytes, write_bw, mtbf_s=per_gpu_mtbf_h * 3600 / g, restart_s=restart_s).values
        days = gpu_hours / g / (1 - ck["waste_at_young_fraction"]) / 24
        cost = g * float(opts["arcadia-h100"]["price_per_accelerator_hour_usd"]) * \
            int(opts["arcadia-h100"]["min_term_weeks"]) * 168
        return {"gpus": g, "days": days, "cost": cost, **ck}

    plans = {k: arcadia(k, h100["gpu_hours"]) for k in range(16, 33, 2)}
    fits = [k for k, p in plans.items() if p["days"] <= train_days_available]
    chosen = plans[fits[0]]
    at35_nodes = next(k for k in range(16, 33, 2) if arcadia(k, at35["gpu_hours"])["days"] <= train_days_available)
    g = chosen["gpus"]
    state = C.memory(n, weights="bf16").values
    shape = dict(layers=model["layers"], hidden=model["hidden"], heads=model["heads"], seq_len=model["seq_len"],
                 micro_batch=1)
    step_s = 6 * n * model["global_batch_tokens"] / (g * peak["H100-SXM5-80GB"] * mfu_h100)
    fsdp_bytes = 3 * (g - 1) / g * 2 * n  # all-gather in forward and backward, reduce-scatter of gradients
    batch = C.batch(6, g).values
    return {
        "params": f"{n:,}",
        "global_batch_tokens": f"{model['global_batch_sequences'] * model['seq_len']:,}",
        "tokenised_TB": f"{model['corpus_tokens'] * 2 / 1e12:.1f} TB",
        "flops": f"{6 * n * tokens:.3e}",
        "mfu_h100": f"{mfu_h100:.1%}",
        "mfu_a100": f"{mfu_a100:.1%}",
        "steps": num(tokens / model["global_batch_tokens"]),
        "h100_gpu_hours": num(h100["gpu_hours"]),
        "p5_cost": usd(h100["gpu_hours"] * float(opts["aws-p5"]["price_per_accelerator_hour_usd"])),
        "p5_days": num(h100["gpu_hours"] / (16 * 8) / 24, 1),
        "a100_gpu_hours": num(a100["gpu_hours"]),
        "p4d_cost": usd(a100["gpu_hours"] * float(opts["aws-p4d"]["price_per_accelerator_hour_usd"])),
        "p4d_days": num(a100["gpu_hours"] / (32 * 8) / 24, 1),
        "onprem_days": num(a100["gpu_hours"] / 32 / 24),
        "v5p_chip_hours": num(v5p["gpu_hours"]),
        "v5p_cost": usd(v5p["gpu_hours"] * float(opts["gcp-v5p"]["price_per_accelerator_hour_usd"])),
        "train_days_available": str(train_days_available),
        "chosen_nodes": str(fits[0]),
        "chosen_gpus": str(g),
        "chosen_days": num(chosen["days"], 1),
        "chosen_cost": usd(chosen["cost"]),
        "budget_left": usd(900_000 - chosen["cost"]),
        "two_fewer_days": num(plans[fits[0] - 2]["days"], 1),
        "two_more_cost": usd(plans[fits[0] + 2]["cost"]),
        "gpu_hours_at_35": num(at35["gpu_hours"]),
        "nodes_at_35": str(at35_nodes),
        "state_GB": num(state["total_state_GB"], 1),
        "zero3_per_gpu_GB": num(C.memory(n, zero=3, dp=g).values["per_device_GB"], 2),
        "act_none_GB": num(C.activation_bytes(**shape) / 1e9, 1),
        "act_full_GB": num(C.activation_bytes(**shape, recompute="full") / 1e9, 2),
        "act_tp8_sp_sel_GB": num(C.activation_bytes(**shape, tp=8, sequence_parallel=True, recompute="selective") / 1e9, 2),
        "tp8_pp2_zero1_GB": num(C.memory(n, tp=8, pp=2, zero=1, dp=g // 16).values["per_device_GB"], 2),
        "step_s": num(step_s, 1),
        "fsdp_GB_per_step": num(fsdp_bytes / 1e9),
        "fsdp_s_at_50GBps": num(fsdp_bytes / 50e9, 1),
        "batch_1056": f"{int(batch['global_batch']):,}",
        "batch_1056_tokens": f"{int(batch['global_batch']) * model['seq_len']:,}",
        "per_gpu_mtbf_h": num(per_gpu_mtbf_h),
        "job_mtbf_h": num(chosen["mtbf_h"]),
        "ckpt_GB": num(ckpt_bytes / 1e9, 1),
        "ckpt_write_s": num(chosen["write_s"]),
        "young_min": num(chosen["young_interval_min"]),
        "waste": f"{chosen['waste_at_young_fraction']:.2%}",
        "expected_failures": num(chosen["days"] * 24 / chosen["mtbf_h"], 1),
        "peak_overestimate": f"{1 / mfu_h100:.1f}x",
        "sparse_overestimate": f"{2 / mfu_h100:.1f}x",
    }


if __name__ == "__main__":
    import sys

    root = Path(__file__).resolve().parents[2]
    for fn in [llm_architecture] if len(sys.argv) < 2 else [globals()[a.replace("-", "_")] for a in sys.argv[1:]]:
        print(f"== {fn.__name__}")
        for k, v in fn(root).items():
            print(f"{k:28s} {v}")
