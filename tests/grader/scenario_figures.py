"""The worked figures of each design scenario, recomputed from its data files with ``grader.tools.calc``.

Each ``<scenario>(root)`` returns ``{name: text}``: the figure as the brief, the constraints or the
interviewer's notes print it. ``test_scenarios.py`` asserts every text appears where it is quoted,
so a figure in the kit cannot drift from the data it is derived from. Run this file to print them.
"""

from __future__ import annotations

import csv
import math
import tomllib
from pathlib import Path

from grader.tools import calc as C

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
    project = toml(d / "project.toml")
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
    train_days_available = (project["deadline_weeks"] - int(opts["arcadia-h100"]["lead_time_weeks"]) -
                            project["validation_weeks"]) * 7

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
        "steps": f"{tokens / model['global_batch_tokens']:,.0f} optimizer",
        "h100_gpu_hours": num(h100["gpu_hours"]),
        "p5_cost": usd(h100["gpu_hours"] * float(opts["aws-p5"]["price_per_accelerator_hour_usd"])),
        "p5_days": num(h100["gpu_hours"] / (16 * 8) / 24, 1),
        "a100_gpu_hours": num(a100["gpu_hours"]),
        "p4d_cost": usd(a100["gpu_hours"] * float(opts["aws-p4d"]["price_per_accelerator_hour_usd"])),
        "p4d_days": num(a100["gpu_hours"] / (32 * 8) / 24, 1),
        "onprem_days": f"{a100['gpu_hours'] / 32 / 24:,.0f} days",
        "v5p_chip_hours": num(v5p["gpu_hours"]),
        "v5p_cost": usd(v5p["gpu_hours"] * float(opts["gcp-v5p"]["price_per_accelerator_hour_usd"])),
        "train_days_available": f"{train_days_available} days",
        "chosen_nodes": f"{fits[0]} nodes",
        "chosen_gpus": f"{g} GPUs",
        "chosen_days": num(chosen["days"], 1),
        "chosen_cost": usd(chosen["cost"]),
        "budget": usd(project["budget_usd"]),
        "deadline": f"{project['deadline_weeks']} weeks",
        "budget_left": usd(project["budget_usd"] - chosen["cost"]),
        "two_fewer_days": num(plans[fits[0] - 2]["days"], 1),
        "two_more_cost": usd(plans[fits[0] + 2]["cost"]),
        "gpu_hours_at_35": num(at35["gpu_hours"]),
        "nodes_at_35": f"{at35_nodes} nodes",
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
        "job_mtbf_h": f"{chosen['mtbf_h']:.0f} h",
        "ckpt_GB": num(ckpt_bytes / 1e9, 1),
        "ckpt_write_s": f"{chosen['write_s']:.0f} s",
        "young_min": f"{chosen['young_interval_min']:.0f} min",
        "waste": f"{chosen['waste_at_young_fraction']:.2%}",
        "save_share_30min": f"{chosen['write_s'] / 1800:.1%}",
        "expected_failures": num(chosen["days"] * 24 / chosen["mtbf_h"], 1),
        "peak_overestimate": f"{1 / mfu_h100:.1f}x",
        "sparse_overestimate": f"{2 / mfu_h100:.1f}x",
    }


# ---- (b) gpu-allocation ---------------------------------------------------------------------------

def gpu_allocation(root: Path) -> dict[str, str]:
    d = root / "exercises" / "gpu-allocation" / "data"
    weeks = rows(d / "utilisation_weekly.csv")
    costs = toml(d / "costs.toml")

    def total(team: str, col: str) -> float:
        return sum(float(r[col] or 0) for r in weeks if r["team"] == team)

    util = {t: total(t, "busy_hours") / total(t, "capacity_hours") for t in ("llm", "vision", "recsys", "applied")}
    n_weeks = len({r["week"] for r in weeks})
    llm_idle = total("llm", "capacity_hours") - total("llm", "busy_hours")
    vision_unmet = total("vision", "requested_hours") - total("vision", "busy_hours")
    tpu_idle = total("recsys", "capacity_hours") - total("recsys", "busy_hours")
    o, t, c = costs["owned"], costs["tpu_commitment"], costs["cloud"]
    owned_monthly = (2 * o["hgx_server_price_usd"] + o["pcie_server_price_usd"]) / o["depreciation_months"] + \
        o["power_kW"] * o["colocation_usd_per_kW_month"]
    per_gpu_hour = owned_monthly / (20 * HOURS_PER_MONTH)
    tpu_monthly = t["chips"] * t["usd_per_chip_hour"] * HOURS_PER_MONTH
    applied_cloud = total("applied", "rented_node_hours") * c["aws_p4d_usd_per_node_hour"]
    vision_waits = sorted(float(r["median_wait_h"]) for r in weeks if r["team"] == "vision")
    new_hgx_per_gpu_hour = (costs["purchase"]["hgx_a100_80gb_server_usd"] / o["depreciation_months"] +
                            costs["purchase"]["hgx_a100_power_kW"] * o["colocation_usd_per_kW_month"]) / (8 * HOURS_PER_MONTH)
    return {
        "weeks": str(n_weeks),
        "budget": usd(costs["budget"]["new_spend_usd"]),
        "tpu_months_left": f"{t['months_remaining']} months",
        "llm_util": f"{util['llm']:.1%}",
        "vision_util": f"{util['vision']:.1%}",
        "tpu_util": f"{util['recsys']:.1%}",
        "applied_util": f"{util['applied']:.1%}",
        "llm_idle_gpu_hours": num(llm_idle),
        "llm_idle_per_week": num(llm_idle / n_weeks),
        "vision_requested": num(total("vision", "requested_hours")),
        "vision_unmet": num(vision_unmet),
        "vision_unmet_per_week": num(vision_unmet / n_weeks),
        "vision_demand_ratio": f"{total('vision', 'requested_hours') / total('vision', 'capacity_hours'):.2f}x",
        "idle_covers_unmet": f"{llm_idle / vision_unmet:.1f}x",
        "vision_wait_range": f"{vision_waits[0]:.0f} to {vision_waits[-1]:.0f} hours",
        "tpu_idle_chip_hours": num(tpu_idle),
        "tpu_idle_cost": usd(tpu_idle * t["usd_per_chip_hour"]),
        "tpu_monthly": usd(tpu_monthly),
        "tpu_remaining": usd(tpu_monthly * t["months_remaining"]),
        "owned_monthly": usd(owned_monthly),
        "owned_per_gpu_hour": f"${per_gpu_hour:.2f}",
        "llm_idle_cost": usd(llm_idle * per_gpu_hour),
        "applied_cloud": usd(applied_cloud),
        "applied_cloud_per_year": usd(applied_cloud / n_weeks * 52),
        "applied_rented_gpu_hours": num(total("applied", "capacity_hours")),
        "applied_arcadia": usd(total("applied", "busy_hours") * c["arcadia_a100_80gb_usd_per_gpu_hour"]),
        "vision_unmet_arcadia_9mo": usd(vision_unmet / n_weeks * 39 * c["arcadia_a100_80gb_usd_per_gpu_hour"]),
        "new_hgx_per_gpu_hour": f"${new_hgx_per_gpu_hour:.2f}",
        "new_hgx_per_gpu_hour_at_60": f"${new_hgx_per_gpu_hour / 0.6:.2f}",
    }


# ---- (c) cost-efficiency --------------------------------------------------------------------------

def aws_business_support(usage: float, tiers: list[float], rates: list[float], minimum: float) -> float:
    out, lo = 0.0, 0.0
    for hi, rate in zip([*tiers, math.inf], rates):
        out += max(0.0, min(usage, hi) - lo) * rate
        lo = hi
    return max(minimum, out)


def cost_efficiency(root: Path) -> dict[str, str]:
    d = root / "exercises" / "cost-efficiency" / "data"
    bills = rows(d / "monthly_costs.csv")
    growth = rows(d / "growth.csv")
    p = toml(d / "prices.toml")
    bench = {r["option"]: r for r in rows(d / "benchmarks.csv")}
    od, buy, nim = p["aws_on_demand"], p["purchase"], p["nimbus"]
    june = bills[-1]
    speedup = float(bench["aws-p5-on-demand"]["tokens_per_s_per_node"]) / \
        float(bench["aws-p4d-on-demand"]["tokens_per_s_per_node"])
    p4d_hours = [float(r["training_p4d_node_hours"]) for r in growth]
    h100_hours = [h / speedup for h in p4d_hours]  # the same work on H100 nodes
    status_quo = sum(p4d_hours) * od["p4d_24xlarge_usd_per_hour"]
    all_p5 = sum(h100_hours) * od["p5_48xlarge_usd_per_hour"]

    def nimbus_plan(nodes: int) -> float:
        reserved = nodes * HOURS_PER_MONTH
        return 12 * reserved * nim["h100_node_usd_per_hour"] + \
            sum(max(0.0, h - reserved) for h in h100_hours) * od["p5_48xlarge_usd_per_hour"]

    plans = {n: nimbus_plan(n) for n in range(nim["min_nodes"], 8)}
    best = min(plans, key=plans.get)
    servers = 4
    own_monthly = (servers * buy["h100_server_usd"] + buy["network_usd_per_4_servers"]) / buy["depreciation_months"] + \
        servers * buy["server_power_kW"] * buy["colocation_usd_per_kW_month"] + buy["operations_usd_per_month"]
    own_node_hour = own_monthly / (servers * HOURS_PER_MONTH)
    lead_months = math.ceil(buy["lead_time_weeks"] / 4.345)  # months before the servers run: all on demand
    own_plan = sum(h * od["p5_48xlarge_usd_per_hour"] for h in h100_hours[:lead_months]) + \
        (12 - lead_months) * own_monthly + sum(max(0.0, h - servers * HOURS_PER_MONTH) * od["p5_48xlarge_usd_per_hour"]
                                               for h in h100_hours[lead_months:])
    infer_hours = sum(float(r["inference_g5_instance_hours"]) for r in growth)
    big_job_tokens = 2.0e9
    total6 = sum(float(r["total_usd"]) for r in bills)
    return {
        "jan_total": usd(float(bills[0]["total_usd"])),
        "june_total": usd(float(june["total_usd"])),
        "six_month_total": usd(total6),
        "june_training_share": f"{float(june['training_usd']) / float(june['total_usd']):.1%}",
        "june_support": usd(float(june["support_usd"])),
        "growth_12": f"{1.08 ** 12:.2f}x",
        "month12_p4d_hours": num(p4d_hours[-1]),
        "twelve_month_p4d_hours": num(sum(p4d_hours)),
        "h100_speedup": f"{speedup:.2f}x",
        "month12_h100_nodes": num(h100_hours[-1] / HOURS_PER_MONTH, 1),
        "month1_h100_nodes": num(h100_hours[0] / HOURS_PER_MONTH, 1),
        "june_h100_nodes": num(float(june["training_p4d_node_hours"]) / speedup / HOURS_PER_MONTH, 1),
        "status_quo_12": usd(status_quo),
        "all_p5_12": usd(all_p5),
        "nimbus_best_nodes": f"{best} nodes",
        "nimbus_best_12": usd(plans[best]),
        "nimbus_best_saving": usd(status_quo - plans[best]),
        "nimbus_node_year": usd(12 * HOURS_PER_MONTH * nim["h100_node_usd_per_hour"]),
        "nimbus_2_commit": usd(2 * 12 * HOURS_PER_MONTH * nim["h100_node_usd_per_hour"]),
        "nimbus_best_commit": usd(best * 12 * HOURS_PER_MONTH * nim["h100_node_usd_per_hour"]),
        "nimbus_2_12": usd(plans[2]),
        "nimbus_6_12": usd(plans[6]),
        "own_node_hour": f"${own_node_hour:.2f}",
        "own_monthly": usd(own_monthly),
        "own_capex": usd(servers * buy["h100_server_usd"] + buy["network_usd_per_4_servers"]),
        "own_lead_months": f"{lead_months} months",
        "own_plan_12": usd(own_plan),
        "inference_12_hours": num(infer_hours),
        "inference_saving_12": usd(infer_hours * (od["g5_xlarge_usd_per_hour"] - p["aws_commitments"]["g5_usd_per_hour"])),
        "big_job_p4d_h": num(big_job_tokens / float(bench["aws-p4d-on-demand"]["tokens_per_s_per_node"]) / 3600, 1),
        "big_job_h100_h": num(big_job_tokens / float(bench["aws-p5-on-demand"]["tokens_per_s_per_node"]) / 3600, 1),
    }


# ---- (d) cross-team-rollout -----------------------------------------------------------------------

def schedule(tasks: list[dict[str, str]]) -> dict[str, tuple[float, float]]:
    """Earliest start and finish (weeks from the start) of each task: each begins when all it depends on end."""
    by_id = {t["id"]: t for t in tasks}
    done: dict[str, tuple[float, float]] = {}

    def visit(tid: str, path: tuple[str, ...] = ()) -> tuple[float, float]:
        if tid in path:
            raise ValueError(f"dependency cycle through {tid}")
        if tid not in done:
            deps = by_id[tid]["depends_on"].split()
            start = max((visit(d, path + (tid,))[1] for d in deps), default=0.0)
            done[tid] = (start, start + float(by_id[tid]["duration_weeks"]))
        return done[tid]

    for t in tasks:
        visit(t["id"])
    return done


def critical_path(tasks: list[dict[str, str]], times: dict[str, tuple[float, float]]) -> list[str]:
    by_id = {t["id"]: t for t in tasks}
    tid = max(times, key=lambda k: times[k][1])
    path = [tid]
    while by_id[tid]["depends_on"].split():
        tid = max(by_id[tid]["depends_on"].split(), key=lambda d: times[d][1])
        path.append(tid)
    return path[::-1]


def cross_team_rollout(root: Path) -> dict[str, str]:
    d = root / "exercises" / "cross-team-rollout" / "data"
    tasks = rows(d / "workplan.csv")
    cap = {r["team"]: r for r in rows(d / "capacity.csv")}
    risks = rows(d / "risks.csv")
    org = toml(d / "org.toml")
    times = schedule(tasks)
    path = critical_path(tasks, times)
    ti = "training-infra"
    demand: dict[str, float] = {}
    for t in tasks:
        demand[t["owner"]] = demand.get(t["owner"], 0.0) + float(t["effort_engineer_weeks"])
        if t["support_team"]:
            demand[t["support_team"]] = demand.get(t["support_team"], 0.0) + float(t["support_engineer_weeks"])
    available_per_week = float(cap[ti]["engineers"]) * float(cap[ti]["share_for_this_programme"])
    horizon = int(max(f for _, f in times.values()))
    load = []
    for w in range(horizon):  # effort spread evenly over each task's weeks, as the draft plan assumes
        load.append(sum(float(t["effort_engineer_weeks"]) / float(t["duration_weeks"]) for t in tasks
                        if t["owner"] == ti and times[t["id"]][0] <= w < times[t["id"]][1]))
    peak_week = max(range(horizon), key=lambda w: load[w])
    obs = cap["observability"]
    obs_per_week = float(obs["engineers"]) * float(obs["share_for_this_programme"])
    t8 = next(t for t in tasks if t["id"] == "T8")
    ranked = sorted(risks, key=lambda r: -int(r["score"]))
    unmitigated = [r["id"] for r in risks if not r["mitigation"].strip()]
    gpu_prod_nodes = 12
    llm_team = next(t for t in org["teams"] if t["id"] == "llm")
    return {
        "critical_path": " -> ".join(path),
        "critical_path_weeks": f"{times[path[-1]][1]:.0f} weeks",
        "t9_end_week": f"end of week {times['T9'][1]:.0f}",
        "t3_end_week": f"end of week {times['T3'][1]:.0f}",
        "ti_demand": num(demand[ti]),
        "ti_capacity": num(float(cap[ti]["engineer_weeks"]), 1),
        "ti_share_used": f"{demand[ti] / float(cap[ti]['engineer_weeks']):.0%}",
        "ti_available_per_week": num(available_per_week, 1),
        "ti_peak_load": num(load[peak_week], 1),
        "ti_peak_week": f"week {peak_week + 1}",
        "t8_weeks_at_capacity": f"{float(t8['effort_engineer_weeks']) / obs_per_week:.0f} weeks",
        "ci_share_of_gpu_prod": f"{2 / gpu_prod_nodes:.1%}",
        "top_risk": f"{ranked[0]['id']} ({ranked[0]['score']})",
        "second_risk": f"{ranked[1]['id']} ({ranked[1]['score']})",
        "unmitigated": ", ".join(unmitigated),
        "llm_engineers": f"{llm_team['engineers']} engineers",
    }


if __name__ == "__main__":
    import sys

    root = Path(__file__).resolve().parents[2]
    for fn in [llm_architecture] if len(sys.argv) < 2 else [globals()[a.replace("-", "_")] for a in sys.argv[1:]]:
        print(f"== {fn.__name__}")
        for k, v in fn(root).items():
            print(f"{k:28s} {v}")
