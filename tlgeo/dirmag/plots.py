"""The figures of the direction-vs-magnitude analysis: LM damage, BLiMP accuracy, repair
recovery and probe scores against delta or block (matplotlib, in :mod:`tlgeo.plotting`'s style),
and the per-token loss change as a circuitsvis ``colored_tokens`` view."""

from __future__ import annotations

import pandas as pd

from .paper import PAPER_BLIMP, PAPER_RECOVERY
from ..errors import InputError

__all__ = ["plot_damage", "token_damage_view", "plot_blimp", "plot_repair", "plot_probes"]


def plot_damage(table: pd.DataFrame):
    """Loss damage against ``delta / median ||h||`` (log x), one line per kind with the seed sd as
    error bars, and the paper's Pythia-410M points (at its absolute deltas) where ``table`` has them."""
    import matplotlib.pyplot as plt

    from ..plotting import WIDTH, legend_outside, style

    if table.empty:
        raise InputError("plot_damage needs a non-empty damage_table")
    fig, ax = plt.subplots(figsize=(WIDTH * 0.8, 3.8), layout="constrained")
    colours = {"magnitude": "#d62728", "angle": "#1f77b4"}
    for kind, colour in colours.items():
        if f"{kind}_damage" in table:
            ax.errorbar(
                table["delta_over_norm"],
                table[f"{kind}_damage"],
                yerr=table[f"{kind}_sd"],
                marker="o",
                ms=4,
                capsize=2,
                color=colour,
                label=kind,
            )
            paper = table.dropna(subset=[f"paper_{kind}"])
            if len(paper):
                ax.plot(
                    paper["delta_over_norm"],
                    paper[f"paper_{kind}"],
                    ls=":",
                    marker="x",
                    color=colour,
                    label=f"{kind} (paper)",
                )
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=0.01)  # damage can be ~0 or slightly negative at small delta
    lows = [table[c].min() for c in ("magnitude_damage", "angle_damage") if c in table]
    if min(lows) >= 0:
        ax.set_ylim(bottom=0)
    ax.set_xlabel("delta / median ||h||  (log)")
    ax.set_ylabel("loss damage (nats)")
    ax.grid(alpha=0.3)
    legend_outside(fig, title="perturbation")
    style(fig)
    return fig


def token_damage_view(table: pd.DataFrame, kind: str):
    """circuitsvis ``colored_tokens`` of ``<kind>_change`` (nats per token) from :func:`token_damage`."""
    import circuitsvis as cv

    col = f"{kind}_change"
    if col not in table:
        raise InputError(f"no {col!r} column; the table has {[c for c in table if c.endswith('_change')]}")
    return cv.tokens.colored_tokens(tokens=[str(t) for t in table["token"]], values=table[col].astype(float).tolist())


def plot_blimp(df: pd.DataFrame, paradigm: str = "pooled"):
    """BLiMP accuracy against ``delta / median ||h||`` (log x), one line per kind (mean and sd over
    seeds), the clean accuracy and chance as horizontal lines, the paper's Pythia-410M points
    where ``df`` has its absolute deltas."""
    import matplotlib.pyplot as plt

    from ..plotting import WIDTH, legend_outside, style

    d = df[df["paradigm"] == paradigm]
    if d.empty:
        raise InputError(f"plot_blimp: no rows for paradigm {paradigm!r}")
    fig, ax = plt.subplots(figsize=(WIDTH * 0.8, 3.6), layout="constrained")
    colours = {"magnitude": "#d62728", "angle": "#1f77b4"}
    relative = bool(d["relative"].iloc[0]) if "relative" in d else False
    for i, (kind, colour) in enumerate(colours.items()):
        g = (
            d[d["kind"] == kind]
            .groupby("delta")
            .agg(x=("delta_over_norm", "first"), acc=("accuracy", "mean"), sd=("accuracy", "std"))
            .reset_index()
        )
        if g.empty:
            continue
        ax.errorbar(g["x"], g["acc"], yerr=g["sd"].fillna(0), marker="o", ms=4, capsize=2, color=colour, label=kind)
        paper = [(x, PAPER_BLIMP[dl][i]) for dl, x in zip(g["delta"], g["x"]) if dl in PAPER_BLIMP and not relative]
        if paper and paradigm == "pooled":
            ax.plot(*zip(*paper), ls=":", marker="x", color=colour, label=f"{kind} (paper)")
    ax.axhline(float(d["clean_accuracy"].iloc[0]), color="0.3", lw=1, label="clean")
    ax.axhline(50, color="0.6", lw=1, ls="--", label="chance")
    ax.set_xscale("log")
    ax.set_xlabel("delta / median ||h||  (log)")
    ax.set_ylabel(f"BLiMP agreement accuracy (%, {paradigm})")
    ax.grid(alpha=0.3)
    legend_outside(fig, title="perturbation")
    style(fig)
    return fig


def plot_repair(df: pd.DataFrame):
    """Recovery (%) per repair and kind at each delta: bars (mean over seeds, sd as error bars),
    the paper's Pythia-410M values at delta = 5 as crosses."""
    import matplotlib.pyplot as plt
    import numpy as np

    from ..plotting import WIDTH, legend_outside, style

    if df.empty:
        raise InputError("plot_repair needs a non-empty causal_repair table")
    deltas = sorted(df["delta"].unique())
    fig, axes = plt.subplots(1, len(deltas), figsize=(WIDTH, 3.4), squeeze=False, sharey=True, layout="constrained")
    colours = {"magnitude": "#d62728", "angle": "#1f77b4"}
    repairs = list(dict.fromkeys(df["repair"]))
    for ax, delta in zip(axes[0], deltas):
        d = df[df["delta"] == delta]
        for j, (kind, colour) in enumerate(colours.items()):
            g = d[d["kind"] == kind].groupby("repair")["recovery"].agg(["mean", "std"]).reindex(repairs)
            x = np.arange(len(repairs)) + (j - 0.5) * 0.38
            ax.bar(x, g["mean"], 0.36, yerr=g["std"].fillna(0), capsize=2, color=colour, alpha=0.85, label=kind)
            paper = [
                PAPER_RECOVERY.get((r, kind)) if float(delta) == 5.0 and not bool(d["relative"].iloc[0]) else None
                for r in repairs
            ]
            if any(p is not None for p in paper):
                ax.plot(
                    x,
                    [np.nan if p is None else p for p in paper],
                    "kx",
                    ms=7,
                    label="paper (Pythia-410M)" if j == 0 else None,
                )
        ax.set_xticks(range(len(repairs)), [{"attn": "attention", "norm": "norms"}.get(r, r) for r in repairs])
        ax.axhline(0, color="0.4", lw=0.8)
        ax.set_title(f"delta {delta:g}")
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].set_ylabel("damage recovered (%)")
    legend_outside(fig, title="perturbation")
    style(fig)
    return fig


def plot_probes(df: pd.DataFrame):
    """Probe score per layer, one panel per task, a line per feature set, the baseline dashed."""
    import matplotlib.pyplot as plt

    from ..plotting import WIDTH, integer_ticks, legend_outside, style

    tasks = list(dict.fromkeys(df["task"]))
    fig, axes = plt.subplots(1, len(tasks), figsize=(WIDTH, 3.2), squeeze=False, layout="constrained")
    for ax, task in zip(axes[0], tasks):
        d = df[df["task"] == task]
        for f in dict.fromkeys(d["features"]):
            g = d[d["features"] == f].sort_values("layer")
            (line,) = ax.plot(g["layer"], g["score"], marker="o", ms=3, label=f)
            ax.fill_between(g["layer"], g["ci_low"], g["ci_high"], color=line.get_color(), alpha=0.15, lw=0)
        b = d.groupby("layer")["baseline"].first()
        ax.plot(b.index, b.values, ls="--", color="0.5", label="baseline")
        ax.set_title("part of speech (accuracy %)" if task == "upos" else "depth to root (R² x 100)")
        ax.set_xlabel("block")
        integer_ticks(ax.xaxis)
    legend_outside(fig, title="probe on")
    style(fig)
    return fig
