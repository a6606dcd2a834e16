"""The debrief's plots as inline SVG (matplotlib, Agg backend, fonts as paths so the page needs
no font files): loss against the reference, memory per rank over steps, the step-time
distribution per attempt, and the throughput rounds. Each draws the series ``grader.report.figures``
picked, so the picture and its text alternative show the same figures.

A debrief is printed, often in black and white: lines differ by marker as well as colour, bars by
hatching, so no series is told apart by colour alone."""

from __future__ import annotations

import io
import re

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from grader.report.figures import PlotData  # noqa: E402

plt.rcParams.update({"svg.fonttype": "path", "svg.hashsalt": "trainwreck", "font.size": 9,
                     "axes.spines.top": False, "axes.spines.right": False, "figure.dpi": 100})

SIZE = (6.4, 3.0)
MARKERS = ("o", "s", "^", "D", "v", "x", "+", "*")
HATCHES = ("", "//", "..", "xx")
MARKS_PER_LINE = 8  # markers along a line: enough to follow it on paper, few enough to see the line


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE: the SVG sits inside HTML
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def _lines(p: PlotData) -> str:
    fig, ax = plt.subplots(figsize=SIZE)
    for i, s in enumerate(p.series):
        ax.plot(s.x, s.y, s.style, label=s.label, linewidth=1.2, marker=MARKERS[i % len(MARKERS)],
                markersize=3.5, markevery=max(1, len(s.y) // MARKS_PER_LINE))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(p.unit)
    ax.legend(loc="best", fontsize=8)
    return _svg(fig)


def _boxes(p: PlotData) -> str:
    labels = [s.label for s in p.series]
    fig, ax = plt.subplots(figsize=(max(SIZE[0], 1.1 * len(labels)), SIZE[1]))
    ax.boxplot([s.y for s in p.series], showfliers=True, whis=(5, 95), flierprops={"markersize": 2})
    ax.set_xticks(range(1, len(labels) + 1), labels, rotation=20 if len(labels) > 5 else 0)
    ax.set_ylabel(p.unit)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_title("whiskers: 5th-95th percentile", fontsize=8, loc="right")
    return _svg(fig)


def _bars(p: PlotData) -> str:
    fig, ax = plt.subplots(figsize=SIZE)
    n = len(p.series[0].y)
    width = 0.8 / len(p.series)
    for k, s in enumerate(p.series):
        xs = [i + (k - (len(p.series) - 1) / 2) * width for i in range(n)]
        ax.bar(xs, s.y, width, label=s.label, hatch=HATCHES[k % len(HATCHES)], edgecolor="black", linewidth=0.5)
    ax.set_xticks(range(n), [f"round {i + 1}" for i in range(n)])
    ax.set_ylabel(p.unit)
    ax.legend(loc="best", fontsize=8)
    return _svg(fig)


def draw(p: PlotData) -> str:
    """The plot of ``p`` as an SVG string."""
    if p.key == "step_times":
        return _boxes(p)
    if p.key == "throughput":
        return _bars(p)
    return _lines(p)
