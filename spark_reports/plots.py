"""Matplotlib figures for the reports, drawn with the Agg canvas (no display, no pyplot state).

Latency distributions use a "nines" x axis, -log10(1 - p), as HdrHistogram and OMB's quantile
charts do, so the tail (p99 … p99.99) gets as much room as the body.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

_NINES_TICKS = (0.0, 0.9, 0.99, 0.999, 0.9999, 0.99999)


# PNG text chunk naming a small-multiples figure's panels, one per line, so a reader (or a test) can tell what
# the image holds without decoding pixels.
PANELS_KEY = "Panels"


def save_figure(fig: Figure, path: Path, panels: Sequence[str] = ()) -> Path:
    """Lay out and write ``fig`` as PNG; ``panels`` named in its text chunk (PANELS_KEY)."""
    FigureCanvasAgg(fig)
    fig.tight_layout()
    metadata = {PANELS_KEY: "\n".join(panels)} if panels else None
    fig.savefig(path, format="png", dpi=100, metadata=metadata)
    return path


def grid(n: int) -> tuple[int, int]:
    """Rows and columns for ``n`` panels: at most three side by side, so each stays readable at 72rem."""
    cols = min(3, max(1, n))
    return math.ceil(max(1, n) / cols), cols


def _log_values(ax: Axes, values: Sequence[float]) -> None:
    """A log-like y axis (shared panels follow it) that keeps 0: symlog whose linear part spans the decade below the
    smallest positive value, so the panels start where the data does instead of showing empty decades."""
    positive = [v for v in values if v > 0]
    if positive:
        ax.set_yscale("symlog", linthresh=10 ** math.floor(math.log10(min(positive))))
        ax.set_ylim(bottom=0)


def _nines_axis(ax: Axes) -> None:
    ax.set_xticks([nines(p) for p in _NINES_TICKS])
    ax.set_xticklabels([f"{p * 100:g}%" for p in _NINES_TICKS])


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
    _nines_axis(ax)
    ax.set_xlabel("percentile")
    ax.set_ylabel(unit)
    if positive:
        ax.set_yscale("symlog", linthresh=1e-3)
        ax.set_ylim(bottom=0)  # symlog would otherwise show empty negative decades
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize="small")
    return save_figure(fig, path)


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
    return save_figure(fig, path)


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
    return save_figure(fig, path)


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
    return save_figure(fig, path)


def cdf_panels(path: Path, title: str, panels: Mapping[str, Mapping[str, Sequence[tuple[float, float]]]],
               unit: str = "ms") -> Path:
    """Small multiples of ``cdf_plot``: one panel per group (scenario, fault), one line per run inside it, the
    same nines x axis and the same log-scaled y axis on every panel so panels compare at a glance."""
    names = list(panels) or ["no runs"]
    rows, cols = grid(len(names))
    fig = Figure(figsize=(4.2 * cols, 3.2 * rows + 0.6))
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
    positive = False
    for i, name in enumerate(names):
        ax = axes[i // cols][i % cols]
        for label, points in panels.get(name, {}).items():
            ys = [v for _, v in points]
            positive = positive or any(v > 0 for v in ys)
            ax.plot([nines(p) for p, _ in points], ys, label=label, linewidth=1.2)
        _nines_axis(ax)
        ax.set_title(name, fontsize="small")
        ax.grid(True, alpha=0.3)
        if len(panels.get(name, {})) > 1:
            ax.legend(fontsize="xx-small")
    for j in range(len(names), rows * cols):  # the grid's spare cells
        fig.delaxes(axes[j // cols][j % cols])
    if positive:
        _log_values(axes[0][0], [v for lines in panels.values() for points in lines.values() for _, v in points])
    for r in range(rows):
        axes[r][0].set_ylabel(unit)
    fig.suptitle(title)
    return save_figure(fig, path, list(panels))


Lines = Mapping[str, Sequence[tuple[float, float]]]


def window_panels(path: Path, title: str, panels: Mapping[str, Mapping[str, Lines]], unit: str = "ms") -> Path:
    """Small multiples of ``window_plot``: ``panels[group][run][label] = [(window start s, value)]``, one panel
    per group with shared axes; inside a panel a colour per run, a line style per percentile."""
    names = list(panels) or ["no runs"]
    rows, cols = grid(len(names))
    fig = Figure(figsize=(4.2 * cols, 3.2 * rows + 0.6))
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
    styles = ("-", "--", ":", "-.")
    for i, name in enumerate(names):
        ax = axes[i // cols][i % cols]
        runs = panels.get(name, {})
        for color_index, (run, lines) in enumerate(runs.items()):
            for style_index, (label, points) in enumerate(lines.items()):
                # Several runs in a panel: the legend names each by its id's last part (the run's random suffix).
                tag = f"{run.rsplit('-', 1)[-1]} {label}" if len(runs) > 1 else label
                ax.plot([x for x, _ in points], [y for _, y in points], styles[style_index % len(styles)],
                        color=f"C{color_index % 10}", marker=".", markersize=3, label=tag)
        ax.set_title(name, fontsize="small")
        ax.grid(True, alpha=0.3)
        if panels.get(name):
            ax.legend(fontsize="xx-small")
    for j in range(len(names), rows * cols):
        fig.delaxes(axes[j // cols][j % cols])
    # Latencies span decades between scenarios: on a linear shared axis one stall would flatten every other panel.
    _log_values(axes[0][0], [y for runs in panels.values() for lines in runs.values() for points in lines.values()
                             for _, y in points])
    for r in range(rows):
        axes[r][0].set_ylabel(unit)
    for c in range(cols):
        axes[-1][c].set_xlabel("s since run start (10 s windows)", fontsize="small")
    fig.suptitle(title)
    return save_figure(fig, path, list(panels))


@dataclass(frozen=True)
class Band:
    """A fault drawn as a shaded span: from its start to its recovery, seconds since the run's start."""

    label: str
    start_s: float
    end_s: float


OUTCOME_COLOURS: Final = {"ok": "#2b7bba", "fail": "#d62728", "unknown": "#ff9f1c"}


def fault_scatter(path: Path, title: str, points: Mapping[str, Sequence[tuple[float, float]]],
                  bands: Sequence[Band], unit: str = "ms") -> Path:
    """Jepsen's latency-over-time chart: one point per send (x its start, y its latency, colour its outcome,
    ``points[outcome]``), each fault a shaded band from its start to its recovery, labelled at the top."""
    fig = Figure(figsize=(11, 4.5))
    ax = fig.add_subplot()
    for outcome, xy in sorted(points.items(), key=lambda item: item[0] != "ok"):  # the rare outcomes on top
        ok = outcome == "ok"
        ax.scatter([x for x, _ in xy], [y for _, y in xy], s=3 if ok else 14, alpha=0.6 if ok else 0.9,
                   marker="o" if ok else "x", linewidths=0 if ok else 1,
                   color=OUTCOME_COLOURS.get(outcome, "grey"), label=f"{outcome} ({len(xy):,})", rasterized=True)
    for i, band in enumerate(bands):
        ax.axvspan(band.start_s, max(band.end_s, band.start_s + 0.05), color="#999999", alpha=0.25,
                   label="fault, start to recovery" if i == 0 else None)
        ax.annotate(band.label, (band.start_s, 1.0), xycoords=("data", "axes fraction"), fontsize="xx-small",
                    rotation=90, va="top", ha="right")
    if any(y > 0 for xy in points.values() for _, y in xy):
        ax.set_yscale("log")
    ax.set_xlabel("s since run start (send start)")
    ax.set_ylabel(f"send latency ({unit})")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small", loc="upper right", markerscale=3)
    return save_figure(fig, path, [f"band {b.label} {b.start_s:.3f} {b.end_s:.3f}" for b in bands])
