"""Matplotlib figures for observation results."""

from __future__ import annotations

import pandas as pd

__all__ = ["plot_profile"]


def plot_profile(summary: pd.DataFrame, stat: str = "parallel_ratio_median"):
    """Per-layer ``stat`` (a :func:`tlgeo.observe.summarize_profile` column), one line per site,
    log y axis with a dashed line at 1 (parallel part as large as the perpendicular)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for site, g in summary.groupby("site"):
        g = g.sort_values("layer")
        ax.plot(g["layer"], g[stat], marker="o", ms=3, label=site)
    ax.axhline(1.0, ls="--", c="grey", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel(stat.replace("_", " "))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
