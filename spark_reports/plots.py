"""Matplotlib figures for the reports, drawn with the Agg canvas (no display, no pyplot state).

Latency distributions use a "nines" x axis, -log10(1 - p), as HdrHistogram and OMB's quantile
charts do, so the tail (p99 … p99.99) gets as much room as the body.
"""

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

_NINES_TICKS = (0.0, 0.9, 0.99, 0.999, 0.9999, 0.99999)


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    return path


def nines(p: float) -> float:
    """Position of percentile fraction ``p`` on the nines axis (p = 1 is clipped to p99.999)."""
    return -math.log10(max(1.0 - p, 1e-5))


def cdf_plot(path: Path, title: str, series: Mapping[str, Sequence[tuple[float, float]]],
             unit: str = "ms") -> Path:
    """One line per run: (percentile fraction, value) points on a nines axis, log-scaled values."""
    fig = Figure(figsize=(9, 5))
    ax = fig.add_subplot()
    positive = False
    for label, points in series.items():
        xs = [nines(p) for p, _ in points]
        ys = [v for _, v in points]
        positive = positive or any(v > 0 for v in ys)
        ax.plot(xs, ys, label=label, linewidth=1.5)
    ax.set_xticks([nines(p) for p in _NINES_TICKS])
    ax.set_xticklabels([f"{p * 100:g}%" for p in _NINES_TICKS])
    ax.set_xlabel("percentile")
    ax.set_ylabel(unit)
    if positive:
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.set_ylim(bottom=0)  # symlog would otherwise show empty negative decades
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize="small")
    return _save(fig, path)


def window_plot(path: Path, title: str, series: Mapping[str, Mapping[str, Sequence[tuple[float, float]]]],
                unit: str = "ms") -> Path:
    """Per-window percentiles over time: ``series[run][label] = [(window start s, value)]``."""
    fig = Figure(figsize=(9, 5))
    ax = fig.add_subplot()
    styles = ("-", "--", ":", "-.")
    for color_index, (run, lines) in enumerate(series.items()):
        color = f"C{color_index % 10}"
        for style_index, (label, points) in enumerate(lines.items()):
            ax.plot([x for x, _ in points], [y for _, y in points], styles[style_index % len(styles)],
                    color=color, marker=".", label=f"{run} {label}")
    ax.set_xlabel("seconds since run start (10 s windows)")
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize="x-small")
    return _save(fig, path)


def bar_plot(path: Path, title: str, categories: Sequence[str], bars: Mapping[str, Sequence[float]],
             ylabel: str) -> Path:
    """Grouped bars: one group per category, one bar per series."""
    fig = Figure(figsize=(9, 5))
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(bars))
    for i, (label, values) in enumerate(bars.items()):
        ax.bar([c + i * width for c in range(len(categories))], values, width=width, label=label)
    ax.set_xticks([c + 0.4 - width / 2 for c in range(len(categories))])
    ax.set_xticklabels(categories, rotation=20, ha="right", fontsize="x-small")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    if bars:
        ax.legend(fontsize="small")
    return _save(fig, path)


def horizon_plot(path: Path, title: str, lines: Mapping[str, Sequence[tuple[float, float]]],
                 points: Mapping[str, tuple[float, float]]) -> Path:
    """Years until overflow against messages a day, log-log; lines for the seed's sizes, points for runs."""
    fig = Figure(figsize=(9, 5))
    ax = fig.add_subplot()
    for label, xy in lines.items():
        ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", label=label)
    for label, (x, y) in points.items():
        ax.scatter([x], [y], marker="*", s=120, label=label, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("messages a day")
    ax.set_ylabel("years until a signed 64-bit offset overflows")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="x-small")
    return _save(fig, path)
