"""Charts shared by every suite (matplotlib, Agg backend: no screen needed)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import Results


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def grouped_bars(results: "Results", path: Path, metric: str, title: str, log: bool = False) -> Path:
    """One cluster of bars per group, one bar per variant, the anchor hatched."""
    plt = _pyplot()
    groups = list(dict.fromkeys(r.group for r in results.rows))
    variants = list(dict.fromkeys(r.variant for r in results.rows))
    width = 0.8 / max(1, len(variants))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) * max(1, len(variants)) * 0.35 + 3), 4.5))
    for i, variant in enumerate(variants):
        xs, ys, hatches = [], [], []
        for g, group in enumerate(groups):
            row = next((r for r in results.rows if r.group == group and r.variant == variant), None)
            if row is None or metric not in row.metrics:
                continue
            xs.append(g + (i - (len(variants) - 1) / 2) * width)
            ys.append(row.metrics[metric])
            hatches.append(row.anchor)
        bars = ax.bar(xs, ys, width, label=variant)
        for bar, is_anchor in zip(bars, hatches):
            if is_anchor:
                bar.set_hatch("//")
    ax.set_xticks(range(len(groups)), groups, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(metric)
    if log:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize=8, ncols=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def lines(series: dict[str, tuple[list[float], list[float]]], path: Path, *, title: str, xlabel: str,
          ylabel: str, logx: bool = False, logy: bool = False,
          vlines: dict[str, float] | None = None) -> Path:
    """One line per series (name → (xs, ys)); vlines marks named x positions (cache sizes ...)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", markersize=3, label=name)
    for label, x in (vlines or {}).items():
        ax.axvline(x, color="grey", linestyle=":", linewidth=1)
        ax.text(x, ax.get_ylim()[1], f" {label}", rotation=90, va="top", fontsize=8, color="grey")
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
