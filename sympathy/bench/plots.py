"""Charts shared by every suite (matplotlib, Agg backend: no screen needed).

Every chart: the value axis names its unit, the anchor is hatched and named "(anchor)" in the
legend, the legend sits outside the data, and constrained layout keeps titles and labels inside the
figure. `layout_problems(fig)` checks that (the tests render every suite's charts through it).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import Results

# Metric name → axis label with its unit (a metric named for its unit, like "GB/s", labels itself).
AXIS_LABELS = {"GFLOPS": "GFLOP/s", "ns": "ns per operation", "time_s": "seconds", "time_ms": "ms",
               "items/s": "items per second", "extra_MiB": "extra memory (MiB)"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _legend_outside(ax) -> None:
    """Right of the axes, top-aligned: it can never cover a bar or a line."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path


def grouped_bars(results: "Results", path: Path, metric: str, title: str, log: bool = False,
                 ylabel: str | None = None) -> Path:
    """One cluster of bars per group, one bar per variant, the anchor hatched."""
    plt = _pyplot()
    groups = list(dict.fromkeys(r.group for r in results.rows))
    variants = list(dict.fromkeys(r.variant for r in results.rows))
    anchors = {r.variant for r in results.rows if r.anchor}
    width = 0.8 / max(1, len(variants))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) * max(1, len(variants)) * 0.35 + 4.5), 4.5),
                           layout="constrained")
    for i, variant in enumerate(variants):
        xs, ys, hatches = [], [], []
        for g, group in enumerate(groups):
            row = next((r for r in results.rows if r.group == group and r.variant == variant), None)
            if row is None or metric not in row.metrics:
                continue
            xs.append(g + (i - (len(variants) - 1) / 2) * width)
            ys.append(row.metrics[metric])
            hatches.append(row.anchor)
        bars = ax.bar(xs, ys, width, label=variant + (" (anchor)" if variant in anchors else ""))
        for bar, is_anchor in zip(bars, hatches):
            if is_anchor:
                bar.set_hatch("//")
                bar.set_edgecolor("black")
    ax.set_xticks(range(len(groups)), groups, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel((ylabel or AXIS_LABELS.get(metric, metric)) + (", log scale" if log else ""))
    if log:
        ax.set_yscale("log")
    ax.set_title(title)
    _legend_outside(ax)
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def lines(series: dict[str, tuple[list[float], list[float]]], path: Path, *, title: str, xlabel: str,
          ylabel: str, logx: bool = False, logy: bool = False,
          vlines: dict[str, float] | None = None) -> Path:
    """One line per series (name → (xs, ys)); vlines marks named x positions (cache sizes ...)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.5, 4.5), layout="constrained")
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", markersize=3, label=name)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    for label, x in (vlines or {}).items():
        ax.axvline(x, color="grey", linestyle=":", linewidth=1)
        # Inside the axes, along the line, from the top down: clear of the title.
        ax.text(x, 0.98, f" {label}", rotation=90, va="top", ha="right", fontsize=8, color="grey",
                transform=ax.get_xaxis_transform())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return _save(fig, path)


# ---- checking a chart ---------------------------------------------------------------------------------
def layout_problems(fig) -> list[str]:
    """What a reader would trip over: text cut at the figure's edge, titles, labels and legends
    overlapping each other, a legend over the data, an axes without a label on its value axis."""
    from matplotlib.category import StrCategoryConverter
    from matplotlib.patches import Rectangle

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = fig.bbox.padded(1)
    problems: list[str] = []
    labels = []                         # (description, bbox) of titles, axis labels, legends
    if fig._suptitle is not None and fig._suptitle.get_text():
        labels.append(("suptitle", fig._suptitle.get_window_extent(renderer)))
    for n, ax in enumerate(a for a in fig.axes if a.get_visible() and a.axison):
        name = f"axes {n} ({ax.get_title() or 'untitled'})"
        has_data = bool(ax.lines or ax.patches or ax.collections)
        for what, text in (("title", ax.title), ("x label", ax.xaxis.label), ("y label", ax.yaxis.label)):
            if text.get_text() and text.get_visible():
                labels.append((f"{name} {what}", text.get_window_extent(renderer)))
        # The ticks drawn: get_xticklabels() also lists ticks outside the view limits, never drawn.
        ticks = [t.label1 for axis in (ax.xaxis, ax.yaxis) for t in axis._update_ticks()
                 if t.label1.get_text() and t.label1.get_visible()]
        for text in [*ticks, *ax.texts]:
            box = text.get_window_extent(renderer)
            if not (frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)):
                problems.append(f"{name}: {text.get_text()!r} is cut at the figure's edge")
        value_axis = ax.xaxis if isinstance(ax.yaxis.get_converter(), StrCategoryConverter) else ax.yaxis
        if has_data and not value_axis.label.get_text():
            problems.append(f"{name}: the value axis has no label (its unit)")
        legend = ax.get_legend()
        if legend is not None:
            box = legend.get_window_extent(renderer)
            labels.append((f"{name} legend", box))
            bars = [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, Rectangle) and p.get_height()]
            points = [pt for line in ax.lines for pt in line.get_transform().transform(line.get_xydata())]
            if any(box.overlaps(b) for b in bars) or any(box.contains(x, y) for x, y in points):
                problems.append(f"{name}: the legend covers data")
    for description, box in labels:
        if not (frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)):
            problems.append(f"{description} is cut at the figure's edge")
    for i, (a, box_a) in enumerate(labels):
        for b, box_b in labels[i + 1:]:
            if box_a.overlaps(box_b):
                problems.append(f"{a} overlaps {b}")
    return problems
