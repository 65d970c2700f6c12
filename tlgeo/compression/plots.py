"""The figures of the compression diagnosis: per-layer perpendicular and parallel error per method
(Figure 6) and the files it is written to, and each compressed model's error against its quality
(the prediction test's scatter, in :mod:`tlgeo.plotting`'s style)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from ..storage import atomic_write
from .counterfactual import SITES
from .evaluation import PREDICTORS

__all__ = ["plot_layers", "plot_prediction", "save_figures"]


def plot_layers(layers: pd.DataFrame, mode: str = "local", tokens: str = "all", sites=SITES, log: bool = True):
    """Figure 6: per-layer ``||e_perp|| / ||Delta_base||`` (solid) and ``||e_par|| / ||Delta_base||``
    (dashed) per method, one panel per site, from a :func:`.decompose.summarize_layers` frame."""
    import matplotlib.pyplot as plt

    d = layers[(layers["mode"] == mode) & (layers["tokens"] == tokens)]
    fig, axes = plt.subplots(1, len(sites), figsize=(4.2 * len(sites), 3.4), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, site in zip(axes[0], sites):
        for k, (method, g) in enumerate(d[d["site"] == site].groupby("method", sort=False)):
            g = g.sort_values("layer")
            c = colors[k % len(colors)]
            ax.plot(g["layer"], g["e_perp_mean"], c=c, marker="o", ms=2.5, label=f"{method} perp")
            ax.plot(g["layer"], g["e_par_mean"], c=c, ls="--", lw=1, label=f"{method} par")
        if log:
            ax.set_yscale("log")
        ax.set_title(f"{site} ({mode}, {tokens} tokens)", fontsize=9)
        ax.set_xlabel("layer")
    axes[0][0].set_ylabel("||e part|| / ||Delta_base||")
    axes[0][-1].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    return fig


def plot_prediction(
    table12: pd.DataFrame,
    quality: pd.DataFrame,
    *,
    mode: str = "local",
    site: str = "block",
    tokens: str = "all",
    target: str = "log_ppl",
):
    """Per compressed model, the mean error, its perpendicular and its parallel part (one
    panel each, log x) against ``log_ppl`` or ``acc_drop``, coloured by method family, with
    Spearman's rho in each title."""
    import matplotlib.pyplot as plt
    from scipy.stats import spearmanr

    from ..plotting import WIDTH, legend_outside, style

    q = quality.set_index("method")
    if target == "log_ppl":
        y, ylabel = np.log(q["ppl"].astype(float)), "log PPL (WikiText-2 test)"
    else:
        y, ylabel = 100 * (q.loc["base", "acc"] - q["acc"].astype(float)), "zero-shot accuracy drop (points)"
    t = table12[
        (table12["mode"] == mode)
        & (table12["site"] == site)
        & (table12["tokens"] == tokens)
        & (table12["ref"] == "delta")
        & table12["method"].isin(q.index)
    ].set_index("method")
    y = y.reindex(t.index)
    fams = [m.split("_")[0] for m in t.index]
    colors = dict(zip(dict.fromkeys(fams), plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    fig, axes = plt.subplots(1, 3, figsize=(WIDTH, 3.0), sharey=True, layout="constrained")
    for ax, (name, col) in zip(axes, PREDICTORS.items()):
        x = t[col].to_numpy(float)
        for fam in colors:
            sel = np.array([f == fam for f in fams])
            ax.scatter(x[sel], y.to_numpy(float)[sel], s=14, c=colors[fam], label=fam)
        ax.set_xscale("log")
        rho = spearmanr(x, y.to_numpy(float)).statistic if len(x) >= 3 else float("nan")
        ax.set_title(f"||{name}|| / ||Delta||: rho {rho:.2f}", fontsize=9)
        ax.set_xlabel(f"mean over layers ({mode}, {site})", fontsize=8)
    axes[0].set_ylabel(ylabel, fontsize=8)
    legend_outside(fig, title="family")
    style(fig)
    return fig


def save_figures(layers: pd.DataFrame, modes: Iterable[str], out: str | os.PathLike) -> list[Path]:
    """Figure 6 per mode (``figure6_<mode>.png``, all tokens) in ``out``; returns the files."""
    import matplotlib.pyplot as plt

    written = []
    for mode in modes:
        fig = plot_layers(layers, mode=mode, tokens="all")
        path = Path(out) / f"figure6_{mode}.png"
        with atomic_write(path, "wb") as f:
            fig.savefig(f, format="png", dpi=110)
        plt.close(fig)
        written.append(path)
    return written
