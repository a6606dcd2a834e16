"""``trainwreck calc memory|allreduce|bubble|batch|checkpoint|compute|precision|accumulation``: capacity
arithmetic, floating-point rounding and loss normalisation, with the formula and source in each
``--help``, over the pure functions in ``grader.tools.calc``. ``--json`` prints the inputs, the
formula, the source and the result, for scripts and for checking a quiz answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from grader import console
from grader.tools import calc as C
from grader.tools import units


def _unit(parse: Callable[[str], float]):
    def callback(ctx, param, value):
        if value is None:
            return None
        try:
            return parse(value)
        except units.UnitError as e:
            raise click.BadParameter(str(e), ctx=ctx, param=param) from None
    return callback


def _counts(ctx, param, value):
    """A comma-separated list of token counts, e.g. 100,400 or 1k,4k."""
    if value is None:
        return None
    try:
        counts = [units.parse_count(part.strip()) for part in value.split(",")]
    except units.UnitError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None
    if any(c != int(c) or c <= 0 for c in counts):
        raise click.BadParameter(f"{value!r}: give positive whole numbers separated by commas, e.g. 100,400",
                                 ctx=ctx, param=param)
    return [int(c) for c in counts]


def _show(result: C.Result, as_json: bool) -> None:
    if as_json:
        console.emit_json(result.to_json())
        return
    rows = [[k, _fmt(k, v)] for k, v in result.values.items()]
    console.table(f"calc {result.name}", ["quantity", "value"], rows)
    console.text(f"formula: {result.formula}")
    console.text(f"source: {result.source}")
    for n in result.notes:
        console.text(f"note: {n}")


def _fmt(key: str, v: float) -> str:
    if key.endswith("_fraction"):
        return f"{v:.4%}"
    if key in ("fits", "step_moves", "tie_moves_up", "tie_moves_down"):
        return "yes" if v else "no"
    if key.endswith("_s") and not key.endswith("_per_s"):
        return f"{v:.6g}  ({units.human_duration(v)})"
    if key in ("global_batch", "accum", "steps", "warmup_steps", "steps_per_epoch", "tokens_per_step",
               "min_microbatches", "in_flight_microbatches", "tokens_total", "significand_bits",
               "ones_sum_stalls_at", "running_sum_stalls_at_addition") or key.endswith("_bytes"):
        return f"{v:,.0f}"
    if key in ("max_params", "flops"):
        return f"{v:.4g}"
    if key.startswith(("spacing_", "step_threshold_", "token_weight_")) or \
            key in ("intended_token_weight", "value_stored", "value_after_step"):
        return f"{v:.10g}"  # powers of two and small weights: every digit shown
    if key.startswith("cost") or key.startswith("waste_cost"):
        return f"{v:,.2f}"
    return f"{v:,.4f}" if abs(v) < 1e6 else f"{v:,.1f}"


_T = TypeVar("_T")


def _run(fn: Callable[..., _T], **kwargs: Any) -> _T:
    """``fn``'s answer (a Result, or the plain figure of a helper such as ``job_mtbf``); bad input
    is a usage error."""
    try:
        return fn(**kwargs)
    except C.CalcError as e:
        raise click.UsageError(str(e)) from None


JSON = click.option("--json", "as_json", is_flag=True, help="Print inputs, formula, source and result as JSON.")
PRECISIONS = click.Choice(list(C.PRECISION_BYTES))


@click.group("calc")
def command():
    """Capacity arithmetic for distributed training, each formula stated and cited.

    Sizes take an explicit unit: GB = 10^9 bytes, GiB = 2^30 bytes; a lower-case b is bits
    (400Gbit/s = 50GB/s). Counts take k, M, B (billion) or T."""


@command.command("memory")
@click.option("--params", required=True, callback=_unit(units.parse_count), help="Parameter count, e.g. 7e9 or 7B.")
@click.option("--weights", type=PRECISIONS, default="bf16", show_default=True, help="Precision of the weights.")
@click.option("--grads", type=PRECISIONS, default=None, help="Precision of the gradients (default: the weights').")
@click.option("--optimizer", type=click.Choice(list(C.OPTIMIZER_MOMENTS)), default="adam", show_default=True)
@click.option("--master/--no-master", default=True, show_default=True,
              help="Keep an fp32 master copy of weights narrower than fp32.")
@click.option("--optimizer-dtype", type=PRECISIONS, default="fp32", show_default=True, help="Precision of the moments.")
@click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True, help="ZeRO stage (FSDP FULL_SHARD = 3).")
@click.option("--dp", type=click.IntRange(min=1), default=1, show_default=True, help="Data-parallel size ZeRO shards over.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True, help="Tensor-parallel size.")
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True, help="Pipeline stages.")
@click.option("--device-memory", callback=_unit(units.parse_size), help="Device memory, e.g. 80GB: also report the largest model that fits.")
@click.option("--layers", type=click.IntRange(min=1), help="Transformer layers (activations).")
@click.option("--hidden", type=click.IntRange(min=1), help="Hidden size (activations).")
@click.option("--heads", type=click.IntRange(min=1), help="Attention heads (activations).")
@click.option("--seq-len", type=click.IntRange(min=1), help="Sequence length (activations).")
@click.option("--micro-batch", type=click.IntRange(min=1), help="Micro-batch size (activations).")
@click.option("--sequence-parallel", is_flag=True, help="Megatron sequence parallelism (activations split by tp).")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="none", show_default=True)
@JSON
def memory_cmd(params, weights, grads, optimizer, master, optimizer_dtype, zero, dp, tp, pp, device_memory,
               layers, hidden, heads, seq_len, micro_batch, sequence_parallel, recompute, as_json):
    """Training memory per device: weights, gradients, optimizer state, ZeRO-sharded.

    \b
    per device = P/(tp*pp) * (w/[dp if zero>=3] + g/[dp if zero>=2] + o/[dp if zero>=1])
    mixed-precision Adam: w = g = 2 bytes, o = K = 12 bytes (fp32 master, momentum, variance),
    so 16 bytes/param: 7B params = 112 GB before sharding.
    Source: Rajbhandari et al., ZeRO, SC 2020 (arXiv:1910.02054), Sec. 3, Fig. 1.

    \b
    Activations are excluded unless --layers --hidden --heads --seq-len --micro-batch are given;
    then per layer (16-bit activations), Korthikanti et al. 2022 (arXiv:2205.05198), Table 2:
    s*b*h*(34 + 5*a*s/h) plain; s*b*h*(10 + 24/t + 5as/(ht)) with tensor parallelism;
    s*b*h/t*(34 + 5as/h) with sequence parallelism; selective recompute drops 5as/h; full
    recompute keeps 2*s*b*h per layer.
    """
    act_args = {"layers": layers, "hidden": hidden, "heads": heads, "seq_len": seq_len, "micro_batch": micro_batch}
    given = [k for k, v in act_args.items() if v is not None]
    activations = None
    if given:
        missing = [k for k, v in act_args.items() if v is None]
        if missing:
            raise click.UsageError(f"activations need all of --layers --hidden --heads --seq-len --micro-batch; "
                                   f"missing {', '.join('--' + m.replace('_', '-') for m in missing)}")
        activations = {**act_args, "tp": tp, "sequence_parallel": sequence_parallel, "recompute": recompute}
    _show(_run(C.memory, params=params, weights=weights, grads=grads, optimizer=optimizer, master=master,
               optimizer_dtype=optimizer_dtype, zero=zero, dp=dp, tp=tp, pp=pp, device_memory=device_memory,
               activations=activations), as_json)


@command.command("allreduce")
@click.option("--size", callback=_unit(units.parse_size), help="Message size, e.g. 14GB or 64KiB.")
@click.option("--params", callback=_unit(units.parse_count), help="Or a gradient of this many parameters...")
@click.option("--dtype", type=PRECISIONS, help="...in this precision.")
@click.option("--n", "n", type=click.IntRange(min=1), required=True, help="Devices in the ring.")
@click.option("--bandwidth", callback=_unit(units.parse_rate), help="Bus bandwidth per device, e.g. 50GB/s or 400Gbit/s.")
@click.option("--latency", callback=_unit(units.parse_duration), default=None, help="Per-step latency, e.g. 5us.")
@click.option("--count", type=click.IntRange(min=1), default=1, show_default=True, help="How many such all-reduces.")
@JSON
def allreduce_cmd(size, params, dtype, n, bandwidth, latency, count, as_json):
    """Ring all-reduce: bytes each device sends, and the time at a bus bandwidth.

    \b
    sent per device = 2(n-1)/n * M    (reduce-scatter then all-gather, 2(n-1) steps)
    time = count * (2(n-1) * latency + sent / bandwidth)
    Source: Patarasuk & Yuan, JPDC 2009; bus bandwidth as defined in NVIDIA nccl-tests
    (doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n). Tree and hierarchical all-reduces differ.
    """
    if (size is None) == (params is None and dtype is None):
        raise click.UsageError("give --size, or --params with --dtype, one of them") from None
    if size is None:
        if params is None or dtype is None:
            raise click.UsageError("--params and --dtype go together") from None
        size = params * C.PRECISION_BYTES[dtype]
    _show(_run(C.allreduce, message_bytes=size, n=n, bandwidth=bandwidth, latency_s=latency or 0.0, count=count),
          as_json)


@command.command("bubble")
@click.option("--p", "p", type=click.IntRange(min=1), required=True, help="Pipeline stages.")
@click.option("--m", "m", type=click.IntRange(min=1), required=True, help="Micro-batches per optimizer step.")
@click.option("--schedule", type=click.Choice(["gpipe", "1f1b"]), default="1f1b", show_default=True)
@click.option("--v", "v", type=click.IntRange(min=1), default=1, show_default=True,
              help="Model chunks per stage (interleaved 1F1B).")
@click.option("--max-bubble", callback=_unit(units.parse_fraction), help="Also report the fewest micro-batches for this bubble, e.g. 5%.")
@JSON
def bubble_cmd(p, m, schedule, v, max_bubble, as_json):
    """Pipeline bubble of GPipe and 1F1B, under both published definitions.

    \b
    over ideal compute = (p-1)/(v*m)       Narayanan et al., SC 2021 (arXiv:2104.04473), Sec. 2.2
    over total time    = (p-1)/(v*m + p-1) Huang et al., GPipe, 2019 (arXiv:1811.06965)
    Rules of thumb quote either; they are the same schedule measured against different totals
    (p=8, m=32: 21.9% of ideal compute, 17.9% of the step). GPipe and 1F1B have the same
    bubble; 1F1B holds at most p micro-batches' activations instead of m. v > 1 is Megatron's
    interleaved 1F1B.
    """
    _show(_run(C.bubble, p=p, m=m, schedule=schedule, v=v, max_bubble=max_bubble), as_json)


@command.command("batch")
@click.option("--micro-batch", type=click.IntRange(min=1), required=True, help="Samples per device per forward.")
@click.option("--dp", type=click.IntRange(min=1), required=True, help="Data-parallel size.")
@click.option("--accum", type=click.IntRange(min=1), help="Gradient-accumulation steps (default 1).")
@click.option("--global-batch", type=click.IntRange(min=1), help="Or: the global batch to keep; solves for --accum.")
@click.option("--seq-len", type=click.IntRange(min=1), help="Tokens per sample: also report tokens per step.")
@click.option("--base-lr", type=click.FloatRange(min=0, min_open=True), help="Learning rate tuned at --base-batch.")
@click.option("--base-batch", type=click.IntRange(min=1), help="Global batch the base lr was tuned at.")
@click.option("--rule", type=click.Choice(["linear", "sqrt"]), default="linear", show_default=True)
@click.option("--dataset-size", type=click.IntRange(min=1), help="Samples per epoch.")
@click.option("--warmup-epochs", type=click.FloatRange(min=0), help="Warm-up length in epochs (needs --dataset-size).")
@click.option("--warmup-steps", type=click.IntRange(min=0), help="Or warm-up length in steps.")
@click.option("--at-step", type=click.IntRange(min=0), help="Also report the learning rate at this step.")
@click.option("--warmup-from", type=click.Choice(["base", "zero"]), default="base", show_default=True,
              help="Warm-up starts at the base lr (Goyal et al.) or at 0.")
@click.option("--bad-rate", callback=_unit(units.parse_fraction),
              help="Share of samples that cannot be trained on (a NaN reading), e.g. 0.1%: report the share of "
                   "steps whose global batch holds one.")
@JSON
def batch_cmd(micro_batch, dp, accum, global_batch, seq_len, base_lr, base_batch, rule, dataset_size,
              warmup_epochs, warmup_steps, at_step, warmup_from, bad_rate, as_json):
    """Effective global batch, and the learning rate scaled to it with warm-up.

    \b
    global batch = micro-batch * accumulation * data-parallel size
    linear rule: lr = base_lr * global/base_batch, after a gradual warm-up from base_lr
    over 5 epochs: Goyal et al. 2017 (arXiv:1706.02677), Sec. 2.1-2.2 (0.1 at 256 -> 3.2 at 8192)
    sqrt rule: lr = base_lr * sqrt(global/base_batch): Hoffer et al. 2017 (arXiv:1705.08741),
    after Krizhevsky 2014 (arXiv:1404.5997)
    Neither rule holds without limit: check the loss curve against the small-batch run.
    """
    _show(_run(C.batch, micro_batch=micro_batch, dp=dp, accum=accum, global_batch=global_batch, base_lr=base_lr,
               base_batch=base_batch, rule=rule, seq_len=seq_len, dataset_size=dataset_size,
               warmup_epochs=warmup_epochs, warmup_steps=warmup_steps, at_step=at_step, warmup_from=warmup_from,
               bad_rate=bad_rate),
          as_json)


@command.command("checkpoint")
@click.option("--size", callback=_unit(units.parse_size), help="Checkpoint size, e.g. 980GB.")
@click.option("--params", callback=_unit(units.parse_count), help="Or: parameter count, with the state below.")
@click.option("--weights", type=PRECISIONS, default="bf16", show_default=True)
@click.option("--optimizer", type=click.Choice(list(C.OPTIMIZER_MOMENTS)), default="adam", show_default=True)
@click.option("--master/--no-master", default=True, show_default=True, help="State holds an fp32 master copy.")
@click.option("--bandwidth", callback=_unit(units.parse_rate), required=True, help="Aggregate write bandwidth, e.g. 10GB/s.")
@click.option("--mtbf", callback=_unit(units.parse_duration), help="Mean time between failures of the job, e.g. 24h.")
@click.option("--node-mtbf", callback=_unit(units.parse_duration), help="Or per node, with --nodes.")
@click.option("--nodes", type=click.IntRange(min=1), help="Nodes in the job (with --node-mtbf).")
@click.option("--save-cost", callback=_unit(units.parse_duration), help="Time training is blocked per save (default: the write time).")
@click.option("--restart", callback=_unit(units.parse_duration), default=None, help="Time to restart after a failure, e.g. 10min.")
@click.option("--interval", callback=_unit(units.parse_duration), help="Also report the waste at this interval.")
@click.option("--cost-per-hour", type=click.FloatRange(min=0, min_open=True), help="Job cost per hour: waste in money per day.")
@JSON
def checkpoint_cmd(size, params, weights, optimizer, master, bandwidth, mtbf, node_mtbf, nodes, save_cost, restart,
                   interval, cost_per_hour, as_json):
    """Checkpoint size and write time, and the interval that minimises saving plus lost work.

    \b
    size = params * (weights + fp32 master + optimizer moments) bytes; gradients are not saved
    (bf16 weights + fp32 master + Adam: 2 + 4 + 8 = 14 bytes/param)
    write time = size / bandwidth
    Young 1974 (CACM 17(9)): tau = sqrt(2 * C * MTBF), C = save cost (time training is blocked)
    Daly 2006 (FGCS 22(3)): tau = sqrt(2CM)(1 + sqrt(C/2M)/3 + C/18M) - C, for C < 2M
    waste(tau) = C/tau + (tau/2 + R)/MTBF; job MTBF = node MTBF / nodes (independent failures)
    """
    if (size is None) == (params is None):
        raise click.UsageError("give --size, or --params (with --weights/--optimizer/--master), one of them") from None
    if size is None:
        per = _run(C.state_bytes_per_param, weights=weights, grads=None, optimizer=optimizer, master=master)
        size = params * (per["weights"] + per["optimizer"])
    if mtbf is not None and (node_mtbf is not None or nodes is not None):
        raise click.UsageError("give --mtbf, or --node-mtbf with --nodes, not both") from None
    if (node_mtbf is None) != (nodes is None):
        raise click.UsageError("--node-mtbf and --nodes go together") from None
    if node_mtbf is not None:
        mtbf = _run(C.job_mtbf, node_mtbf_s=node_mtbf, nodes=nodes)
    _show(_run(C.checkpoint, size_bytes=size, bandwidth=bandwidth, mtbf_s=mtbf, save_s=save_cost,
               restart_s=restart or 0.0, interval_s=interval, cost_per_hour=cost_per_hour), as_json)


@command.command("compute")
@click.option("--params", required=True, callback=_unit(units.parse_count), help="Parameter count N, e.g. 30B.")
@click.option("--tokens", required=True, callback=_unit(units.parse_count), help="Training tokens D, e.g. 1.5T.")
@click.option("--peak-tflops", type=click.FloatRange(min=0, min_open=True), required=True,
              help="Dense peak of one device in the training precision, TFLOP/s (A100 bf16: 312).")
@click.option("--devices", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--mfu", callback=_unit(units.parse_fraction), help="Model FLOPs utilisation, e.g. 40%.")
@click.option("--gpu-hours", type=click.FloatRange(min=0, min_open=True), help="Or: device-hours spent, to get the MFU.")
@click.option("--price", type=click.FloatRange(min=0, min_open=True), help="Price per device-hour: also report the cost.")
@JSON
def compute_cmd(params, tokens, peak_tflops, devices, mfu, gpu_hours, price, as_json):
    """Training compute C = 6*N*D, and the device-hours, wall clock and cost at an MFU.

    \b
    FLOPs = 6 * N * D      Kaplan et al. 2020 (arXiv:2001.08361), Sec. 2.1
    device-hours = FLOPs / (peak * MFU) / 3600, MFU as in Chowdhery et al., PaLM 2022, Sec. 4.1
    Given --gpu-hours instead, the MFU they imply: FLOPs / (gpu_hours * 3600 * peak).
    """
    _show(_run(C.compute, params=params, tokens=tokens, peak_flops=peak_tflops * 1e12, devices=devices, mfu=mfu,
               gpu_hours=gpu_hours, price_per_device_hour=price), as_json)


@command.command("precision")
@click.option("--dtype", type=click.Choice(list(C.FLOAT_FORMATS)), required=True, help="Floating-point format.")
@click.option("--value", type=float, default=1.0, show_default=True, help="The number stored, e.g. a weight.")
@click.option("--step", type=float, help="Also add this step to VALUE once: does it move?")
@click.option("--count", type=click.IntRange(min=1), help="Also add VALUE this many times to a running total kept in DTYPE.")
@JSON
def precision_cmd(dtype, value, step, count, as_json):
    """Rounding in bf16, fp16 and fp32: the spacing at a value, the smallest step
    that moves it, and where a running sum stalls.

    \b
    numbers in [2^e, 2^(e+1)) are spaced 2^(e - m), m = explicit mantissa bits
    (bf16 m = 7, fp16 m = 10, fp32 m = 23; one more significant bit is implicit)
    x + s rounds to the nearest number, ties to the even significand, so s moves
    x only when |s| is MORE than half the spacing: bf16 at 1.0 is spaced 2^-7
    above, a step must exceed 2^-8 (exactly 2^-8 ties back to 1.0).
    A running sum of ones kept in the format stalls at 2^(m+1): 256 in bf16,
    2048 in fp16, 2^24 in fp32.
    Source: IEEE 754-2019 (roundTiesToEven); bfloat16: Kalamkar et al. 2019
    (arXiv:1905.12322).
    """
    _show(_run(C.precision, dtype=dtype, value=value, step=step, count=count), as_json)


@command.command("accumulation")
@click.option("--tokens", callback=_counts, help="Tokens per accumulated micro-batch, e.g. 100,400.")
@click.option("--rank-tokens", callback=_counts, help="Or tokens per DDP rank, one micro-batch each, e.g. 1k,1k,1k,5k.")
@click.option("--accum", type=click.IntRange(min=1), help="Or this many equal micro-batches.")
@click.option("--loss", type=click.Choice(list(C.LOSS_REDUCTIONS)), default="mean", show_default=True,
              help="Each part's loss over its own tokens.")
@click.option("--divide-by", type=click.Choice(list(C.DIVISORS)),
              help="Before backward(), each part's loss is divided by: nothing, the number of micro-batches, or "
                   "the step's tokens (over the world size under DDP). Default: accum, or none for --rank-tokens.")
@click.option("--lr", type=click.FloatRange(min=0, min_open=True), help="SGD learning rate: also report the effective one.")
@click.option("--adam-eps-ratio", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Adam's eps over a typical gradient entry (0: gradients far above eps).")
@JSON
def accumulation_cmd(tokens, rank_tokens, accum, loss, divide_by, lr, adam_eps_ratio, as_json):
    """Gradient accumulation and DDP loss normalisation: each token's weight
    against the per-token mean over the step, and the gradient's scale.

    \b
    token weight = [1/n_i for a mean loss] / divisor / [world size under DDP]
    factor = weight / (1 / step's tokens): above 1, the token is over-weighted
    gradient scale = sum_i n_i * weight_i; SGD's effective lr = lr * scale
    Adam at a steady gradient g: update s*g/(s*|g| + eps): s cancels but for eps
    backward() sums into .grad (PyTorch autograd); DDP averages gradients over
    the ranks (DistributedDataParallel); Adam: Kingma & Ba 2015
    (arXiv:1412.6980), Algorithm 1.
    Per-micro-batch means divided by K equalise micro-batches, not tokens: sum
    the token losses and divide by the step's token count instead.
    """
    _show(_run(C.accumulation, tokens=tokens, rank_tokens=rank_tokens, accum=accum, loss=loss, divide_by=divide_by,
               lr=lr, adam_eps_ratio=adam_eps_ratio), as_json)
