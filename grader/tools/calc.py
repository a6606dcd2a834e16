"""Capacity arithmetic for distributed training: pure functions, no torch, every formula cited.

Each calculator returns a :class:`Result` holding its inputs, the formula as text, the source, the
named values (the unit is in each key: ``_bytes``, ``_GB`` = 10^9 bytes, ``_GiB`` = 2^30 bytes,
``_s``, ``_h``, ``_fraction``) and notes on what the model leaves out. The quiz's model answers and
the scenarios' worked figures are checked against these functions, so a figure in the kit has one
place where it is computed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from grader.tools.units import GB, GiB

PRECISION_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}
# optimizer state per parameter, in moments of the state dtype: Adam(W) keeps two (Kingma & Ba 2015)
OPTIMIZER_MOMENTS = {"adam": 2, "adamw": 2, "sgd-momentum": 1, "sgd": 0, "none": 0}

SOURCES = {
    "zero": "Rajbhandari et al., ZeRO: Memory Optimizations Toward Training Trillion Parameter Models, "
            "SC 2020 (arXiv:1910.02054), Sec. 3 and Fig. 1",
    "activations": "Korthikanti et al., Reducing Activation Recomputation in Large Transformer Models, "
                   "MLSys 2023 (arXiv:2205.05198), Sec. 4, Eq. 1-2 and Table 2",
    "ring": "Patarasuk & Yuan, Bandwidth optimal all-reduce algorithms for clusters of workstations, "
            "JPDC 69(2), 2009; bus bandwidth as in NVIDIA nccl-tests doc/PERFORMANCE.md",
    "gpipe": "Huang et al., GPipe, NeurIPS 2019 (arXiv:1811.06965), Sec. 2.3",
    "megatron": "Narayanan et al., Efficient Large-Scale Language Model Training on GPU Clusters Using "
                "Megatron-LM, SC 2021 (arXiv:2104.04473), Sec. 2.2",
    "goyal": "Goyal et al., Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour, 2017 "
             "(arXiv:1706.02677), Sec. 2.1-2.2",
    "sqrt": "Hoffer et al., Train longer, generalize better, NeurIPS 2017 (arXiv:1705.08741); first "
            "suggested in Krizhevsky, One weird trick for parallelizing CNNs, 2014 (arXiv:1404.5997)",
    "young": "Young, A first order approximation to the optimum checkpoint interval for restart dumps, "
             "CACM 17(9), 1974",
    "daly": "Daly, A higher order estimate of the optimum checkpoint interval for restart dumps, "
            "Future Generation Computer Systems 22(3), 2006",
    "ieee754": "IEEE 754-2019, Sec. 3.4 (binary formats) and 4.3.1 (roundTiesToEven); bfloat16 as in "
               "Kalamkar et al., A Study of BFLOAT16 for Deep Learning Training, 2019 (arXiv:1905.12322)",
    "accumulation": "PyTorch autograd accumulates into .grad (torch.Tensor.backward); DistributedDataParallel "
                    "averages gradients over the world size (torch.nn.parallel.DistributedDataParallel docs); "
                    "Kingma & Ba, Adam, ICLR 2015 (arXiv:1412.6980), Algorithm 1",
    "kaplan": "Kaplan et al., Scaling Laws for Neural Language Models, 2020 (arXiv:2001.08361), Sec. 2.1 "
              "(C = 6ND); MFU as defined by Chowdhery et al., PaLM, 2022 (arXiv:2204.02311), Sec. 4.1 and App. B",
}


class CalcError(ValueError):
    """A bad input to a calculator: one line naming the input and what to give instead."""


@dataclass(frozen=True)
class Result:
    name: str
    inputs: dict[str, Any]
    formula: str
    source: str
    values: dict[str, float]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"calculator": self.name, "inputs": self.inputs, "formula": self.formula,
                "source": self.source, "result": self.values, "notes": self.notes}


def _positive(name: str, value: float, integer: bool = False) -> None:
    if not (value > 0) or (integer and int(value) != value):
        kind = "a positive whole number" if integer else "positive"
        raise CalcError(f"{name} must be {kind}, not {value:g}")


def _precision(name: str, value: str) -> int:
    if value not in PRECISION_BYTES:
        raise CalcError(f"{name} {value!r} is not a precision; use one of {', '.join(PRECISION_BYTES)}")
    return PRECISION_BYTES[value]


def state_bytes_per_param(weights: str, grads: str | None, optimizer: str, master: bool,
                          optimizer_dtype: str = "fp32") -> dict[str, int]:
    """Bytes per parameter of the training state: weights, gradients, optimizer (master copy + moments).

    With fp16/bf16 weights, Adam and an fp32 master copy this is ZeRO's 2 + 2 + K with K = 12."""
    if optimizer not in OPTIMIZER_MOMENTS:
        raise CalcError(f"optimizer {optimizer!r} is unknown; use one of {', '.join(OPTIMIZER_MOMENTS)}")
    w = _precision("weights", weights)
    g = _precision("grads", grads or weights)
    o = _precision("optimizer dtype", optimizer_dtype)
    master_bytes = 4 if master and w < 4 and optimizer != "none" else 0
    return {"weights": w, "grads": g, "optimizer": master_bytes + OPTIMIZER_MOMENTS[optimizer] * o}


def activation_bytes(layers: int, hidden: int, heads: int, seq_len: int, micro_batch: int, tp: int = 1,
                     sequence_parallel: bool = False, recompute: str = "none") -> float:
    """Activation memory of one micro-batch through ``layers`` transformer layers, 16-bit activations.

    Korthikanti et al. 2022, per layer: s*b*h*(34 + 5*a*s/h) without parallelism;
    s*b*h*(10 + 24/t + 5*a*s/(h*t)) with tensor parallelism t; s*b*h/t*(34 + 5*a*s/h) with sequence
    parallelism too; selective recomputation drops the 5*a*s/h attention term; full recomputation
    keeps only each layer's input, 2*s*b*h (the paper's Table 2 figure, with or without parallelism)."""
    for n, v in (("layers", layers), ("hidden", hidden), ("heads", heads), ("seq_len", seq_len),
                 ("micro_batch", micro_batch), ("tp", tp)):
        _positive(n, v, integer=True)
    if recompute not in ("none", "selective", "full"):
        raise CalcError(f"recompute {recompute!r} is unknown; use none, selective or full")
    sbh = seq_len * micro_batch * hidden
    attention = 5 * heads * seq_len / hidden
    per_layer: float
    if recompute == "full":
        per_layer = 2 * sbh
    elif sequence_parallel:
        per_layer = sbh / tp * (34 + (0 if recompute == "selective" else attention))
    else:
        per_layer = sbh * (10 + 24 / tp + (0 if recompute == "selective" else attention / tp))
    return per_layer * layers


def memory(params: float, weights: str = "bf16", grads: str | None = None, optimizer: str = "adam",
           master: bool = True, optimizer_dtype: str = "fp32", zero: int = 0, dp: int = 1, tp: int = 1,
           pp: int = 1, device_memory: float | None = None, activations: dict[str, Any] | None = None
           ) -> Result:
    """Training memory per device: state sharded by ZeRO stage over ``dp``, split over ``tp * pp``."""
    _positive("params", params)
    for n, v in (("dp", dp), ("tp", tp), ("pp", pp)):
        _positive(n, v, integer=True)
    if zero not in (0, 1, 2, 3):
        raise CalcError(f"zero stage {zero} is unknown; use 0 (none), 1 (optimizer), 2 (+gradients) or "
                        "3 (+parameters)")
    per = state_bytes_per_param(weights, grads, optimizer, master, optimizer_dtype)
    local = params / (tp * pp)  # parameters held by one model-parallel rank, layers split evenly
    shard = {"weights": dp if zero >= 3 else 1, "grads": dp if zero >= 2 else 1,
             "optimizer": dp if zero >= 1 else 1}
    parts = {k: local * per[k] / shard[k] for k in per}
    state = sum(parts.values())
    act = activation_bytes(**activations) / pp if activations else 0.0
    per_device = state + act
    values: dict[str, float] = {
        "bytes_per_param": float(sum(per.values())),
        "total_state_GB": params * sum(per.values()) / GB,
        "total_state_GiB": params * sum(per.values()) / GiB,
        **{f"{k}_per_device_GB": v / GB for k, v in parts.items()},
        "state_per_device_GB": state / GB,
        "activations_per_device_GB": act / GB,
        "per_device_GB": per_device / GB,
        "per_device_GiB": per_device / GiB,
    }
    if device_memory is not None:
        _positive("device memory", device_memory)
        state_per_param_per_device = state / params
        values["fits"] = float(per_device <= device_memory)
        values["max_params"] = max(0.0, (device_memory - act) / state_per_param_per_device)
    notes = [f"{per['weights']} B weights + {per['grads']} B gradients + {per['optimizer']} B optimizer state "
             "per parameter (optimizer state = fp32 master copy where weights are narrower, plus moments)"]
    if activations:
        notes.append("activations by Korthikanti et al. 2022 for one micro-batch of all layers, divided by pp "
                     "(with 1F1B the first stage holds pp micro-batches of layers/pp layers: the same total); "
                     "embedding and logits activations left out")
    else:
        notes.append("activations, temporary buffers, communication buckets and allocator fragmentation "
                     "are excluded: give --layers/--hidden/--heads/--seq-len/--micro-batch to add activations")
    if zero and dp == 1:
        notes.append("ZeRO with dp = 1 shards nothing")
    formula = ("per device = P/(tp*pp) * (w/[dp if zero>=3] + g/[dp if zero>=2] + o/[dp if zero>=1]) "
               "+ activations/pp; mixed-precision Adam: w = g = 2, o = K = 12 bytes")
    return Result("memory", {"params": params, "weights": weights, "grads": grads or weights,
                             "optimizer": optimizer, "master": master, "optimizer_dtype": optimizer_dtype,
                             "zero": zero, "dp": dp, "tp": tp, "pp": pp, "device_memory_bytes": device_memory,
                             "activations": activations},
                  formula, SOURCES["zero"] + (("; " + SOURCES["activations"]) if activations else ""),
                  values, notes)


def allreduce(message_bytes: float, n: int, bandwidth: float | None = None, latency_s: float = 0.0,
              count: int = 1) -> Result:
    """Ring all-reduce: each device sends (and receives) 2(n-1)/n of the message, in 2(n-1) steps."""
    _positive("message size", message_bytes)
    _positive("n (devices)", n, integer=True)
    _positive("count", count, integer=True)
    if latency_s < 0:
        raise CalcError("latency cannot be negative")
    per_call = 2 * (n - 1) / n * message_bytes
    values = {"message_bytes": message_bytes, "message_GB": message_bytes / GB,
              "sent_per_device_bytes": per_call, "sent_per_device_GB": per_call / GB,
              "sent_per_device_GiB": per_call / GiB, "steps": 2.0 * (n - 1),
              "sent_total_bytes": per_call * count, "sent_total_GB": per_call * count / GB}
    notes = ["each device also receives the same amount; the reduction arithmetic is not timed"]
    if bandwidth is not None:
        _positive("bandwidth", bandwidth)
        per_call_s = 2 * (n - 1) * latency_s + per_call / bandwidth
        values.update({"bandwidth_GB_per_s": bandwidth / GB, "time_per_call_s": per_call_s,
                       "time_s": per_call_s * count})
        notes.append("bandwidth is the bus bandwidth of one device's link (nccl-tests' busbw); a bandwidth "
                     "quoted in bits is 8x smaller in bytes")
    if n == 1:
        notes.append("one device: nothing to send")
    return Result("allreduce", {"message_bytes": message_bytes, "n": n, "bandwidth_bytes_per_s": bandwidth,
                                "latency_s": latency_s, "count": count},
                  "sent per device = 2(n-1)/n * M; time = count * (2(n-1)*latency + sent/bandwidth)",
                  SOURCES["ring"], values, notes)


def bubble(p: int, m: int, schedule: str = "1f1b", v: int = 1, max_bubble: float | None = None) -> Result:
    """Pipeline bubble, both definitions: over ideal compute time (Narayanan et al.) and over total."""
    _positive("p (stages)", p, integer=True)
    _positive("m (micro-batches)", m, integer=True)
    _positive("v (chunks per stage)", v, integer=True)
    if schedule not in ("gpipe", "1f1b"):
        raise CalcError(f"schedule {schedule!r} is unknown; use gpipe or 1f1b")
    if schedule == "gpipe" and v > 1:
        raise CalcError("interleaving (v > 1) is a 1F1B schedule; use --schedule 1f1b or v = 1")
    over_ideal = (p - 1) / (v * m)
    values = {"bubble_over_ideal_fraction": over_ideal,
              "bubble_over_total_fraction": (p - 1) / (v * m + p - 1),
              "efficiency_fraction": v * m / (v * m + p - 1),
              "in_flight_microbatches": float(m if schedule == "gpipe" else min(p, m))}
    notes = ["over ideal = bubble time / ideal compute time, Narayanan et al. 2021 (the figure Megatron-LM "
             "quotes); over total = bubble time / (ideal + bubble), GPipe's (p-1)/(m+p-1); same schedule, "
             "two definitions, so compare like with like",
             "GPipe and 1F1B have the same bubble; 1F1B bounds the micro-batches whose activations the first "
             "stage holds to p instead of m"]
    if max_bubble is not None:
        if not 0 < max_bubble < 1:
            raise CalcError("max bubble must be a fraction between 0 and 1, e.g. 5%")
        values["min_microbatches"] = float(math.ceil((p - 1) / (v * max_bubble) - 1e-9))
        notes.append("min micro-batches: the smallest m whose bubble over ideal compute is at most max bubble")
    if v > 1 and m % p:
        notes.append(f"Megatron-LM's interleaved schedule needs m to be a multiple of p ({m} is not of {p})")
    return Result("bubble", {"p": p, "m": m, "schedule": schedule, "v": v, "max_bubble": max_bubble},
                  "bubble over ideal = (p-1)/(v*m); over total = (p-1)/(v*m + p-1)",
                  SOURCES["megatron"] + "; " + SOURCES["gpipe"], values, notes)


def batch(micro_batch: int, dp: int, accum: int | None = None, global_batch: int | None = None,
          base_lr: float | None = None, base_batch: int | None = None, rule: str = "linear",
          seq_len: int | None = None, dataset_size: int | None = None, warmup_epochs: float | None = None,
          warmup_steps: int | None = None, at_step: int | None = None, warmup_from: str = "base",
          bad_rate: float | None = None) -> Result:
    """Global batch = micro-batch * accumulation * data-parallel size; learning rate scaled with it."""
    _positive("micro-batch", micro_batch, integer=True)
    _positive("dp", dp, integer=True)
    notes: list[str] = []
    if accum is not None and global_batch is not None:
        raise CalcError("give --accum or --global-batch, not both")
    if global_batch is not None:
        _positive("global batch", global_batch, integer=True)
        if global_batch % (micro_batch * dp):
            raise CalcError(f"global batch {global_batch} is not a multiple of micro-batch x dp = "
                            f"{micro_batch * dp}; change the micro-batch or the global batch")
        accum = global_batch // (micro_batch * dp)
        notes.append(f"accumulation solved for the global batch: {global_batch} / ({micro_batch} x {dp})")
    elif accum is None:
        accum = 1  # neither given: no accumulation
    _positive("accum", accum, integer=True)
    g = micro_batch * accum * dp
    values: dict[str, float] = {"global_batch": float(g), "accum": float(accum)}
    if seq_len is not None:
        _positive("seq_len", seq_len, integer=True)
        values["tokens_per_step"] = float(g * seq_len)
    source = SOURCES["goyal"]
    if base_lr is not None or base_batch is not None:
        if base_lr is None or base_batch is None:
            raise CalcError("give both --base-lr and --base-batch to scale the learning rate")
        _positive("base lr", base_lr)
        _positive("base batch", base_batch, integer=True)
        if rule not in ("linear", "sqrt"):
            raise CalcError(f"rule {rule!r} is unknown; use linear (Goyal et al.) or sqrt (Krizhevsky)")
        k = g / base_batch
        values["lr"] = base_lr * (k if rule == "linear" else math.sqrt(k))
        if rule == "sqrt":
            source += "; " + SOURCES["sqrt"]
        notes.append("linear scaling held to about 8k images for ResNet-50 in Goyal et al.; for Adam and "
                     "very large batches it breaks down: treat the scaled lr as a starting point")
    if dataset_size is not None:
        _positive("dataset size", dataset_size, integer=True)
        values["steps_per_epoch"] = float(dataset_size // g)
        notes.append("steps per epoch = floor(dataset / global batch): the last partial batch dropped")
    if warmup_epochs is not None:
        if dataset_size is None:
            raise CalcError("--warmup-epochs needs --dataset-size to count steps")
        if warmup_epochs < 0:
            raise CalcError("warm-up epochs cannot be negative")
        if warmup_steps is not None:
            raise CalcError("give --warmup-epochs or --warmup-steps, not both")
        warmup_steps = round(warmup_epochs * values["steps_per_epoch"])
    if warmup_steps is not None:
        if warmup_steps < 0:
            raise CalcError("warm-up steps cannot be negative")
        values["warmup_steps"] = float(warmup_steps)
    if at_step is not None:
        if "lr" not in values:
            raise CalcError("--at-step needs --base-lr and --base-batch")
        if at_step < 0:
            raise CalcError("--at-step cannot be negative")
        if warmup_from not in ("base", "zero"):
            raise CalcError(f"warm-up start {warmup_from!r} is unknown; use base (Goyal et al.) or zero")
        w = warmup_steps or 0
        ramp = min(1.0, at_step / w) if w else 1.0
        assert base_lr is not None  # "lr" is in values only where the base lr was given
        start = base_lr if warmup_from == "base" else 0.0
        values["lr_at_step"] = start + (values["lr"] - start) * ramp
        notes.append("gradual warm-up: linear from the base lr (Goyal et al.; --warmup-from zero: from 0, as many "
                     "codebases do) up to the scaled lr over the warm-up steps; no decay modelled")
    if bad_rate is not None:
        if not 0 < bad_rate < 1:
            raise CalcError("--bad-rate is the share of samples that cannot be trained on: above 0, below 1")
        # a step skipped on every rank together (the ranks' collectives stay paired) is lost whenever
        # any sample of the global batch is bad; a rank alone would see only its own share
        values["skipped_share"] = 1 - (1 - bad_rate) ** g
        values["rank_bad_share"] = 1 - (1 - bad_rate) ** (micro_batch * accum)
        notes.append("samples bad independently at random; a skip agreed by every rank loses the whole global "
                     "batch, a share that grows with the global batch: repair or filter bad samples before "
                     "the sampler shards them")
    return Result("batch", {"micro_batch": micro_batch, "accum": accum, "dp": dp, "base_lr": base_lr,
                            "base_batch": base_batch, "rule": rule, "seq_len": seq_len,
                            "dataset_size": dataset_size, "warmup_epochs": warmup_epochs,
                            "warmup_steps": warmup_steps, "at_step": at_step, "warmup_from": warmup_from,
                            "bad_rate": bad_rate},
                  "global = micro-batch * accum * dp; lr = base_lr * global/base_batch (linear) or "
                  "* sqrt(global/base_batch); warm-up lr(s) = start + (lr - start) * s/warmup, start = base_lr or 0; "
                  "steps holding a bad sample = 1 - (1 - bad_rate)^global",
                  source, values, notes)


def young_interval(save_s: float, mtbf_s: float) -> float:
    return math.sqrt(2 * save_s * mtbf_s)


def daly_interval(save_s: float, mtbf_s: float) -> float:
    if save_s >= 2 * mtbf_s:
        return mtbf_s
    r = save_s / (2 * mtbf_s)
    return math.sqrt(2 * save_s * mtbf_s) * (1 + math.sqrt(r) / 3 + r / 9) - save_s


def waste_fraction(interval_s: float, save_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """First-order expected share of time lost: saving (C/tau) plus, per failure, half an interval of
    recomputation and the restart ((tau/2 + R)/M)."""
    return save_s / interval_s + (interval_s / 2 + restart_s) / mtbf_s


def checkpoint(size_bytes: float, bandwidth: float, mtbf_s: float | None = None, save_s: float | None = None,
               restart_s: float = 0.0, interval_s: float | None = None, cost_per_hour: float | None = None
               ) -> Result:
    """Checkpoint write time at a bandwidth, and the interval minimising saving plus lost work."""
    _positive("checkpoint size", size_bytes)
    _positive("bandwidth", bandwidth)
    write_s = size_bytes / bandwidth
    values: dict[str, float] = {"size_bytes": size_bytes, "size_GB": size_bytes / GB,
                                "size_GiB": size_bytes / GiB, "write_s": write_s}
    notes = ["bandwidth is what the whole job writes at (all writers together, to the slowest tier)"]
    cost = write_s if save_s is None else save_s
    if save_s is not None:
        notes.append("save cost given: the time training is blocked, e.g. only the copy to host memory with "
                     "an asynchronous writer")
    if mtbf_s is not None:
        _positive("MTBF", mtbf_s)
        if restart_s < 0:
            raise CalcError("restart time cannot be negative")
        young = young_interval(cost, mtbf_s)
        values.update({"mtbf_h": mtbf_s / 3600, "save_cost_s": cost, "young_interval_s": young,
                       "young_interval_min": young / 60, "daly_interval_s": daly_interval(cost, mtbf_s),
                       "waste_at_young_fraction": waste_fraction(young, cost, mtbf_s, restart_s)})
        notes.append("Young: tau = sqrt(2*C*M), first order in C/M; Daly 2006 adds higher-order terms "
                     "(tau = sqrt(2CM)(1 + sqrt(C/2M)/3 + C/18M) - C) that matter when C is not small next to M")
        if interval_s is not None:
            _positive("interval", interval_s)
            values["waste_at_interval_fraction"] = waste_fraction(interval_s, cost, mtbf_s, restart_s)
        if cost_per_hour is not None:
            _positive("cost per hour", cost_per_hour)
            values["waste_cost_per_day_at_young"] = values["waste_at_young_fraction"] * cost_per_hour * 24
            if interval_s is not None:
                values["waste_cost_per_day_at_interval"] = values["waste_at_interval_fraction"] * cost_per_hour * 24
        notes.append("waste = C/tau + (tau/2 + R)/M: failures assumed exponential (memoryless), at most one "
                     "per interval, restart time R counted once per failure")
    elif interval_s is not None or cost_per_hour is not None:
        raise CalcError("--interval and --cost-per-hour need a failure rate: give --mtbf or --node-mtbf with --nodes")
    return Result("checkpoint", {"size_bytes": size_bytes, "bandwidth_bytes_per_s": bandwidth, "mtbf_s": mtbf_s,
                                 "save_s": save_s, "restart_s": restart_s, "interval_s": interval_s,
                                 "cost_per_hour": cost_per_hour},
                  "write = size / bandwidth; Young tau = sqrt(2*C*MTBF); waste(tau) = C/tau + (tau/2 + R)/MTBF",
                  SOURCES["young"] + "; " + SOURCES["daly"], values, notes)


def job_mtbf(node_mtbf_s: float, nodes: int) -> float:
    """Independent, exponentially distributed failures: a job of n nodes fails n times as often."""
    _positive("node MTBF", node_mtbf_s)
    _positive("nodes", nodes, integer=True)
    return node_mtbf_s / nodes


def compute(params: float, tokens: float, peak_flops: float, devices: int = 1, mfu: float | None = None,
            gpu_hours: float | None = None, price_per_device_hour: float | None = None) -> Result:
    """Training compute C = 6ND, and the time, device-hours and cost it takes at a given MFU."""
    _positive("params", params)
    _positive("tokens", tokens)
    _positive("peak FLOP/s", peak_flops)
    _positive("devices", devices, integer=True)
    if (mfu is None) == (gpu_hours is None):
        raise CalcError("give --mfu (to get the time) or --gpu-hours (to get the MFU they imply), one of them")
    flops = 6 * params * tokens
    values: dict[str, float] = {"flops": flops}
    if mfu is not None:
        if not 0 < mfu <= 1:
            raise CalcError("MFU must be above 0 and at most 100%")
        device_s = flops / (peak_flops * mfu)
        values["gpu_hours"] = device_s / 3600
    elif gpu_hours is not None:  # (exactly one of the two is given: checked above)
        _positive("GPU-hours", gpu_hours)
        values["gpu_hours"] = gpu_hours
        values["mfu_fraction"] = flops / (gpu_hours * 3600 * peak_flops)
    values["wall_clock_h"] = values["gpu_hours"] / devices
    values["wall_clock_days"] = values["wall_clock_h"] / 24
    if price_per_device_hour is not None:
        _positive("price per device-hour", price_per_device_hour)
        values["cost"] = values["gpu_hours"] * price_per_device_hour
    return Result("compute", {"params": params, "tokens": tokens, "peak_flops": peak_flops, "devices": devices,
                              "mfu": mfu, "gpu_hours": gpu_hours, "price_per_device_hour": price_per_device_hour},
                  "FLOPs = 6*N*D; device-hours = FLOPs / (peak * MFU) / 3600; wall clock = device-hours / devices",
                  SOURCES["kaplan"], values,
                  ["6ND counts the forward and backward matmuls of a dense transformer and leaves out attention's "
                   "s^2 term; recomputation does not count towards MFU; failures, restarts and evaluation are "
                   "not in the wall clock"])


# Binary floating-point formats as (exponent bits, explicit mantissa bits); significand precision is
# mantissa + 1 (the implicit leading one). bf16 keeps fp32's exponent and 7 of its 23 mantissa bits.
FLOAT_FORMATS = {"fp32": (8, 23), "fp16": (5, 10), "bf16": (8, 7)}
_MAX_ROUNDED_ADDITIONS = 200_000  # a running sum that needs more rounded additions than this is refused


@dataclass(frozen=True)
class _Float:
    """One binary format's arithmetic, exact (in fractions), rounding to nearest with ties to even."""

    mantissa: int
    emin: int  # exponent of the smallest normal number
    emax: int

    @classmethod
    def of(cls, dtype: str) -> _Float:
        if dtype not in FLOAT_FORMATS:
            raise CalcError(f"dtype {dtype!r} is not a floating-point format here; use one of "
                            f"{', '.join(FLOAT_FORMATS)}")
        exponent, mantissa = FLOAT_FORMATS[dtype]
        emax = 2 ** (exponent - 1) - 1
        return cls(mantissa, 1 - emax, emax)

    @property
    def max_finite(self) -> Fraction:
        return (2 - Fraction(1, 2**self.mantissa)) * Fraction(2) ** self.emax

    def _exponent(self, a: Fraction) -> int:
        """floor(log2(a)) for a > 0, never below emin (subnormals share emin's spacing)."""
        e = a.numerator.bit_length() - a.denominator.bit_length()
        if a < Fraction(2) ** e:
            e -= 1
        return max(e, self.emin)

    def spacing(self, a: Fraction) -> Fraction:
        """The gap between consecutive numbers in the binade of |a| (its ulp)."""
        return Fraction(2) ** (self._exponent(abs(a)) - self.mantissa) if a else \
            Fraction(2) ** (self.emin - self.mantissa)

    def round(self, x: Fraction) -> Fraction:
        if x == 0:
            return Fraction(0)
        q = self.spacing(x)
        r = round(x / q) * q  # Fraction rounds half to even: the tie goes to the even significand
        if abs(r) > self.max_finite:
            raise CalcError(f"{float(x):g} overflows this format (largest finite {float(self.max_finite):g})")
        return r

    def next_up(self, v: Fraction) -> Fraction:
        if v < 0:
            return -self.next_down(-v)
        return v + self.spacing(v)

    def next_down(self, v: Fraction) -> Fraction:
        if v <= 0:
            return -self.next_up(-v)
        e = self._exponent(v)
        below = Fraction(2) ** (e - 1 - self.mantissa) if v == Fraction(2) ** e and e > self.emin else self.spacing(v)
        return v - below

    def running_sum(self, value: Fraction, count: int) -> tuple[Fraction, int | None]:
        """The total after adding ``value`` ``count`` times to 0, each sum rounded; and the addition
        from which the total stopped changing (None if it never did)."""
        total, done, rounded_steps = Fraction(0), 0, 0
        while done < count:
            q = self.spacing(total)
            if total > 0 and value > 0 and (value / q).denominator == 1:
                # every sum up to the top of this binade is exact: take them in one jump
                top = Fraction(2) ** (self._exponent(total) + 1)
                k = min(count - done, int((top - total) / value))
                if k >= 1:
                    total += k * value
                    done += k
                    continue
            after = self.round(total + value)
            done += 1
            if after == total:
                return total, done  # unchanged now, so unchanged by every later addition too
            total = after
            rounded_steps += 1
            if rounded_steps > _MAX_ROUNDED_ADDITIONS:
                raise CalcError(f"the running sum needs more than {_MAX_ROUNDED_ADDITIONS:,} rounded "
                                "additions; give a smaller --count")
        return total, None


def precision(dtype: str, value: float = 1.0, step: float | None = None, count: int | None = None) -> Result:
    """Rounding at VALUE in a binary format: the spacing of its numbers, the smallest step that moves
    VALUE when added (round to nearest, ties to even), and where a running sum stalls."""
    fmt = _Float.of(dtype)
    if not math.isfinite(value):
        raise CalcError(f"value must be a finite number, not {value}")
    v = fmt.round(Fraction(value))
    up, down = fmt.next_up(v) - v, v - fmt.next_down(v)
    values: dict[str, float] = {
        "significand_bits": float(fmt.mantissa + 1),
        "value_stored": float(v),
        "spacing_up": float(up),
        "spacing_down": float(down),
        # a step of more than half the gap rounds to the neighbour; exactly half is a tie
        "step_threshold_up": float(up / 2),
        "step_threshold_down": float(down / 2),
        "tie_moves_up": float(fmt.round(v + up / 2) != v),
        "tie_moves_down": float(fmt.round(v - down / 2) != v),
    }
    ones_total, _ = fmt.running_sum(Fraction(1), 2 ** (fmt.emax + 1))
    values["ones_sum_stalls_at"] = float(ones_total)
    notes = [f"{dtype}: {fmt.mantissa} explicit mantissa bits + the implicit leading 1; every integer up to "
             f"2^{fmt.mantissa + 1} is exact",
             "a step moves VALUE only when it is MORE than the threshold (half the gap); a step of exactly the "
             "threshold is a tie, which goes to the even significand: tie_moves_* says whether that moves VALUE",
             "one rounding of the exact sum, as a kernel computing in this format does; torch adds a Python "
             "scalar to a bf16/fp16 tensor in fp32 first, which can differ only where that fp32 sum is itself "
             "rounded"]
    if v != Fraction(value):
        notes.append(f"VALUE {value!r} is not a {dtype} number: it is stored as {float(v)!r}")
    if step is not None:
        if not math.isfinite(step) or step == 0:
            raise CalcError(f"step must be a finite non-zero number, not {step}")
        after = fmt.round(v + Fraction(step))
        values["value_after_step"] = float(after)
        values["step_moves"] = float(after != v)
    if count is not None:
        _positive("count", count, integer=True)
        total, stalled = fmt.running_sum(v, count)
        values["running_sum"] = float(total)
        values["running_sum_exact"] = float(v * count)
        if stalled is not None:
            values["running_sum_stalls_at_addition"] = float(stalled)
        notes.append("running sum: a total kept in this format, VALUE added COUNT times, each sum rounded; "
                     "torch's sum() of a bf16 tensor accumulates in fp32 and does not stall this way")
    return Result("precision", {"dtype": dtype, "value": value, "step": step, "count": count},
                  "numbers in [2^e, 2^(e+1)) are spaced 2^(e - mantissa bits); x + s rounds to the nearest, "
                  "ties to the even significand, so s moves x when |s| > spacing/2; a running sum of ones "
                  "stalls at 2^(mantissa bits + 1)",
                  SOURCES["ieee754"], values, notes)


LOSS_REDUCTIONS = ("mean", "sum")
DIVISORS = ("none", "accum", "tokens")


def accumulation(tokens: Sequence[int] | None = None, rank_tokens: Sequence[int] | None = None,
                 accum: int | None = None, loss: str = "mean", divide_by: str | None = None,
                 lr: float | None = None, adam_eps_ratio: float = 0.0) -> Result:
    """The weight each token gets in the step's gradient, against the per-token mean over the step.

    Parts are micro-batches accumulated on one rank (``tokens``, or ``accum`` equal ones) or ranks of
    DDP with one micro-batch each (``rank_tokens``). Each part's loss is its tokens' ``loss``
    (mean or sum), divided by ``divide_by``: none, accum (the number of micro-batches) or tokens (the
    step's token count; under DDP that count over the world size, since DDP then averages). backward()
    sums the parts' gradients into .grad; DDP divides by the world size."""
    given = [n for n, v in (("--tokens", tokens), ("--rank-tokens", rank_tokens), ("--accum", accum)) if v is not None]
    if len(given) != 1:
        raise CalcError("give one of --tokens (micro-batches), --rank-tokens (DDP ranks) or --accum "
                        f"(equal micro-batches){'; not ' + ' and '.join(given) if given else ''}")
    if loss not in LOSS_REDUCTIONS:
        raise CalcError(f"loss {loss!r} is unknown; use mean (over the part's tokens) or sum")
    ddp = rank_tokens is not None
    if accum is not None:
        _positive("accum", accum, integer=True)
        counts = [1] * accum  # equal micro-batches: the size does not change any factor
    else:
        given_counts = rank_tokens if ddp else tokens
        assert given_counts is not None  # exactly one of the three is given: checked above
        counts = list(given_counts)
    if not counts:
        raise CalcError("give at least one token count")
    for c in counts:
        _positive("a token count", c, integer=True)
    divide_by = divide_by or ("none" if ddp else "accum")
    if divide_by not in DIVISORS:
        raise CalcError(f"divide-by {divide_by!r} is unknown; use one of {', '.join(DIVISORS)}")
    if ddp and divide_by == "accum":
        raise CalcError("--divide-by accum divides by the micro-batches of one rank; with --rank-tokens there is "
                        "one each: use none or tokens")
    parts, total = len(counts), sum(counts)
    world = parts if ddp else 1
    divisor = {"none": Fraction(1), "accum": Fraction(parts), "tokens": Fraction(total, world)}[divide_by]
    # d(step loss)/d(one token's loss) for a token of each part: its reduction, the division, DDP's average
    weights = [(Fraction(1, n) if loss == "mean" else Fraction(1)) / divisor / world for n in counts]
    intended = Fraction(1, total)  # the per-token mean over every token of the step
    factors = [w / intended for w in weights]
    scale = sum((n * w for n, w in zip(counts, weights, strict=True)), Fraction(0))  # intended: 1
    label = "rank" if ddp else "microbatch"
    values: dict[str, float] = {}
    if accum is not None:  # equal micro-batches of any size: one factor for all of them
        values["token_weight_factor"] = float(factors[0])
    else:
        values.update({"tokens_total": float(total), "intended_token_weight": float(intended)})
        for i, (n, w, f) in enumerate(zip(counts, weights, factors, strict=True), start=1):
            values[f"token_weight_{label}_{i}"] = float(w)
            values[f"token_weight_factor_{label}_{i}"] = float(f)
            values[f"token_share_fraction_{label}_{i}"] = n / total
            values[f"gradient_share_fraction_{label}_{i}"] = float(n * w / scale)
        values["token_weight_spread"] = float(max(factors) / min(factors))
    values["gradient_scale"] = float(scale)
    # Adam's update at a steady gradient g (m = g, v = g^2 after bias correction) is g/(|g| + eps);
    # scaled by s it is s*g/(s*|g| + eps). With eps = r*|g|: factor = s*(1 + r)/(s + r).
    if adam_eps_ratio < 0:
        raise CalcError("the Adam eps ratio cannot be negative")
    values["adam_update_factor"] = float(scale * (1 + Fraction(adam_eps_ratio)) / (scale + Fraction(adam_eps_ratio)))
    if lr is not None:
        _positive("lr", lr)
        values["effective_lr_sgd"] = lr * float(scale)
    notes = ["token weight = d(loss backpropagated)/d(one token's loss); the intended per-token mean gives every "
             "token 1/(step's tokens); a factor above 1 over-weights the token",
             "gradient_scale = the step's gradient over the intended one where every token's gradient is the same; "
             "plain SGD (and SGD with momentum) steps lr x gradient, so its effective lr is lr x gradient_scale",
             "adam_update_factor: Adam divides m (scaled by s) by sqrt(v) (scaled by s), so the scale cancels but "
             "for eps; --adam-eps-ratio is eps over a typical gradient entry (0: gradients far above eps). "
             "Gradient clipping at a fixed norm and weight decay do see the scale"]
    if ddp:
        notes.append("DDP all-reduces and divides by the world size: every rank counts 1/world_size whatever its "
                     "token count; the fix scales each rank's summed token loss by world_size / the step's tokens "
                     "(--loss sum --divide-by tokens), the count all-reduced first")
    else:
        notes.append("dividing by the micro-batches equalises micro-batches, not tokens; the fix divides each "
                     "micro-batch's summed token loss by the step's token count (--loss sum --divide-by tokens)")
    return Result("accumulation", {"tokens": list(tokens) if tokens is not None else None,
                                   "rank_tokens": list(rank_tokens) if rank_tokens is not None else None,
                                   "accum": accum, "loss": loss,
                                   "divide_by": divide_by, "lr": lr, "adam_eps_ratio": adam_eps_ratio},
                  "token weight = [1/n_i if mean] / divisor / [world size under DDP]; factor = weight x "
                  "step's tokens; gradient scale = sum_i n_i x weight_i; SGD effective lr = lr x scale",
                  SOURCES["accumulation"], values, notes)
