"""The debrief's plots as inline SVG (matplotlib, Agg backend, fonts as paths so the page needs
no font files): loss against the reference, memory per rank over steps, the step-time
distribution per attempt, and the throughput rounds. Each function returns an SVG string, or None
when there is nothing to plot (the report then says why)."""

from __future__ import annotations

import io
import re
from typing import Any

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams.update({"svg.fonttype": "path", "svg.hashsalt": "trainwreck", "font.size": 9,
                     "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 100})

WARMUP = 2  # steps left out of timing figures (start-up)
SIZE = (6.4, 3.0)


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG sits inside HTML
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def _ranks(run: dict[str, Any] | None) -> dict[str, dict[str, list]]:
    return (run or {}).get("ranks") or {}


def loss(latest: dict[str, Any] | None, reference: dict[str, Any] | None, label: str) -> str | None:
    """Loss per optimizer step on each rank of the candidate's latest run, and the reference's rank 0."""
    lines = []
    for r, s in sorted(_ranks(latest).items()):
        if s.get("loss"):
            lines.append((f"{label}, rank {r}", s["step"], s["loss"], "-"))
    ref = _ranks(reference).get("0") or next(iter(_ranks(reference).values()), None)
    if ref and ref.get("loss"):
        lines.append(("reference, rank 0", ref["step"], ref["loss"], "--"))
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=SIZE)
    for name, x, y, style in lines:
        pts = [(a, b) for a, b in zip(x, y) if b is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=name, linewidth=1.2)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.legend(loc="best", fontsize=8)
    return _svg(fig)


def memory(runs: list[tuple[str, dict[str, Any]]]) -> str | None:
    """Memory per rank over steps (CUDA allocated where recorded, else RSS), one line per rank per
    labelled run (e.g. the first and the latest attempt)."""
    fig, ax = plt.subplots(figsize=SIZE)
    what, drawn = "RSS (MB)", 0
    for i, (label, run) in enumerate(runs):
        for r, s in sorted(_ranks(run).items()):
            ys = s.get("cuda_alloc_mb") or s.get("rss_mb") or []
            if s.get("cuda_alloc_mb"):
                what = "CUDA allocated (MB)"
            pts = [(a, b) for a, b in zip(s.get("step", []), ys) if b is not None]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-" if i == len(runs) - 1 else ":",
                    label=f"{label}, rank {r}", linewidth=1.2)
            drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(what)
    ax.legend(loc="best", fontsize=8)
    return _svg(fig)


def step_times(runs: list[tuple[str, dict[str, Any]]]) -> str | None:
    """Distribution of step times (ms, every rank, start-up steps left out) per labelled run."""
    data, labels = [], []
    for label, run in runs:
        xs = [d * 1000 for s in _ranks(run).values() for d in (s.get("dt") or [])[WARMUP:] if d is not None]
        if xs:
            data.append(xs)
            labels.append(label)
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(max(SIZE[0], 1.1 * len(data)), SIZE[1]))
    ax.boxplot(data, showfliers=True, whis=(5, 95), flierprops={"markersize": 2})
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=20 if len(labels) > 5 else 0)
    ax.set_ylabel("step time (ms)")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_title("whiskers: 5th-95th percentile", fontsize=8, loc="right")
    return _svg(fig)


def throughput(tp: dict[str, Any] | None) -> str | None:
    """Steps/s of each role in each measured round (the grader's interleaved rounds)."""
    rounds = (tp or {}).get("rounds") or []
    if not rounds:
        return None
    roles = [r for r in ("broken", "candidate", "reference", "bound") if any(r in x for x in rounds)]
    fig, ax = plt.subplots(figsize=SIZE)
    width = 0.8 / len(roles)
    for k, role in enumerate(roles):
        xs = [i + (k - (len(roles) - 1) / 2) * width for i in range(len(rounds))]
        ax.bar(xs, [x.get(role, 0.0) for x in rounds], width, label=role)
    ax.set_xticks(range(len(rounds)), [f"round {i + 1}" for i in range(len(rounds))])
    ax.set_ylabel("steps/s (slowest rank)")
    ax.legend(loc="best", fontsize=8)
    return _svg(fig)
