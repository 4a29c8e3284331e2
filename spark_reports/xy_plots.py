"""Line plots of one measured quantity against another (recovery time vs log size, rate vs queue count),
drawn with the Agg canvas like ``plots``: no display, no pyplot state."""

from collections.abc import Mapping, Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def xy_plot(path: Path, title: str, series: Mapping[str, Sequence[tuple[float, float]]], xlabel: str, ylabel: str,
            *, logx: bool = False, reference: tuple[str, float] | None = None) -> Path:
    """One line with markers per series, points sorted by x; ``reference`` = (label, y) draws a dashed level."""
    fig = Figure(figsize=(9, 5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, points in series.items():
        xy = sorted(points)
        ax.plot([x for x, _ in xy], [y for _, y in xy], marker="o", label=label)
    if reference is not None:
        ax.axhline(reference[1], linestyle="--", color="grey", label=reference[0])
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if series or reference is not None:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    return path
