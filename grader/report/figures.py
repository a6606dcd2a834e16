"""What each debrief plot shows, as data and as words: the series a plot draws (picked from the
attempts' stored per-step figures), a one-sentence text alternative that states the figures, and
a small table of them. No matplotlib here: the Markdown debrief and a screen reader get the same
content as the pixels, and ``grader.report.plots`` draws exactly these series."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

WARMUP = 2  # steps left out of timing figures (start-up)
ROLES = ("broken", "candidate", "reference", "bound")  # throughput roles, in the grader's order


@dataclass
class Series:
    label: str
    y: list[float]
    x: list[float] = field(default_factory=list)  # optimizer steps; empty for a distribution or bars
    style: str = "-"  # matplotlib line style: the reference and earlier attempts are dashed or dotted


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass
class PlotData:
    key: str
    unit: str  # what the y axis measures
    series: list[Series]


def num(v: float | None) -> str:
    """A figure as a reader wants it: three significant digits, no exponent below a million."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}" if a >= 0.001 or a == 0 else f"{v:.2e}"


def signed(v: float) -> str:
    """A change: '+39.0', '-2.50', '0'."""
    return ("+" if v > 0 else "") + num(v)


def percentile(xs: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, which matplotlib's boxplot uses)."""
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _ranks(run: dict[str, Any] | None) -> dict[str, dict[str, list]]:
    return (run or {}).get("ranks") or {}


def _points(xs: list, ys: list) -> tuple[list[float], list[float]]:
    pts = [(a, b) for a, b in zip(xs, ys) if b is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


# ---- the series each plot draws --------------------------------------------------------------
def loss(latest: dict[str, Any] | None, reference: dict[str, Any] | None, label: str) -> PlotData | None:
    """Loss per optimizer step on each rank of the candidate's latest run, and the reference's rank 0."""
    out = []
    for r, s in sorted(_ranks(latest).items()):
        x, y = _points(s.get("step", []), s.get("loss") or [])
        if y:
            out.append(Series(f"{label}, rank {r}", y, x))
    ref = _ranks(reference).get("0") or next(iter(_ranks(reference).values()), None)
    if ref:
        x, y = _points(ref.get("step", []), ref.get("loss") or [])
        if y:
            out.append(Series("reference, rank 0", y, x, "--"))
    return PlotData("loss", "loss", out) if out else None


def memory(runs: list[tuple[str, dict[str, Any] | None]]) -> PlotData | None:
    """Memory per rank over steps (CUDA allocated where recorded, else RSS), one line per rank per
    labelled run (e.g. the first and the latest attempt; all but the last dotted)."""
    out, cuda = [], False
    for i, (label, run) in enumerate(runs):
        for r, s in sorted(_ranks(run).items()):
            cuda = cuda or bool(s.get("cuda_alloc_mb"))
            x, y = _points(s.get("step", []), s.get("cuda_alloc_mb") or s.get("rss_mb") or [])
            if y:
                out.append(Series(f"{label}, rank {r}", y, x, "-" if i == len(runs) - 1 else ":"))
    return PlotData("memory", "CUDA allocated (MB)" if cuda else "RSS (MB)", out) if out else None


def step_times(runs: list[tuple[str, dict[str, Any] | None]]) -> PlotData | None:
    """Step times (ms, every rank, start-up steps left out) per labelled run."""
    out = []
    for label, run in runs:
        ys = [d * 1000 for s in _ranks(run).values() for d in (s.get("dt") or [])[WARMUP:] if d is not None]
        if ys:
            out.append(Series(label, ys))
    return PlotData("step_times", "step time (ms)", out) if out else None


def throughput(tp: dict[str, Any] | None) -> PlotData | None:
    """Steps/s of each role in each measured round (the grader's interleaved rounds)."""
    rounds = (tp or {}).get("rounds") or []
    roles = [r for r in ROLES if any(r in x for x in rounds)]
    out = [Series(role, [x.get(role, 0.0) for x in rounds], list(range(1, len(rounds) + 1))) for role in roles]
    return PlotData("throughput", "steps/s (slowest rank)", out) if out else None


# ---- the same in words and as a table ---------------------------------------------------------
def _median(ys: list[float]) -> float:
    return percentile(ys, 50)


def alt(p: PlotData) -> str:
    """One sentence stating what the plot shows with its figures, for alt text and paper."""
    s = p.series
    if p.key == "loss":
        parts = [f"{x.label} from {num(x.y[0])} to {num(x.y[-1])} over {len(x.y)} steps" for x in s
                 if x.style == "-"]
        parts += [f"{x.label} ends at {num(x.y[-1])}" for x in s if x.style != "-"]
        return "Loss per optimizer step: " + "; ".join(parts) + "."
    if p.key == "memory":
        def one(x: Series) -> str:
            d = x.y[-1] - x.y[0]
            change = "flat" if abs(d) < 0.5 else signed(d)
            return f"{x.label} from {num(x.y[0])} to {num(x.y[-1])} ({change}, peak {num(max(x.y))})"
        return f"{p.unit} over {max(len(x.y) for x in s)} steps: " + "; ".join(one(x) for x in s) + "."
    if p.key == "step_times":
        return (f"Step time in ms, every rank, the first {WARMUP} steps of each left out: "
                + "; ".join(f"{x.label} median {num(_median(x.y))} (5th-95th percentile {num(percentile(x.y, 5))}"
                            f"-{num(percentile(x.y, 95))}, {len(x.y)} steps)" for x in s) + ".")
    n = len(s[0].y)
    return (f"Steps/s of the slowest rank in {n} measured round{'' if n == 1 else 's'}, median per role: "
            + ", ".join(f"{x.label} {num(_median(x.y))}" for x in s) + ".")


def table(p: PlotData) -> Table:
    """The plot's figures, one row per series: what a reader checks the picture against."""
    s = p.series
    if p.key == "loss":
        return Table(["line", "steps", "first", "last", "lowest"],
                     [[x.label, str(len(x.y)), num(x.y[0]), num(x.y[-1]), num(min(x.y))] for x in s])
    if p.key == "memory":
        return Table(["line", "steps", f"first {p.unit}", "last", "peak", "change"],
                     [[x.label, str(len(x.y)), num(x.y[0]), num(x.y[-1]), num(max(x.y)), signed(x.y[-1] - x.y[0])]
                      for x in s])
    if p.key == "step_times":
        return Table(["run", "steps", "median ms", "5th pct", "95th pct", "slowest"],
                     [[x.label, str(len(x.y)), num(_median(x.y)), num(percentile(x.y, 5)), num(percentile(x.y, 95)),
                       num(max(x.y))] for x in s])
    n = len(s[0].y)
    return Table(["role", *[f"round {i + 1}" for i in range(n)], "median"],
                 [[x.label, *[num(v) for v in x.y], num(_median(x.y))] for x in s])
