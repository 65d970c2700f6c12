"""Figures of the PDSF analysis: energy and PR per layer, the complexity gradient, discrimination per
part, single-pass KL and the angle left at later layers, divergence steps per condition, and
the static/dynamic split of F during generation."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import InputError
from ..geometry.subspaces import PARTS
from ..plotting import WIDTH

__all__ = [
    "plot_energy_pr",
    "plot_complexity",
    "plot_discrimination",
    "plot_single_pass",
    "plot_divergence",
    "plot_f_dynamics",
    "COLORS",
]

COLORS = {
    "P": "#d62728",
    "D": "#1f77b4",
    "S": "#2ca02c",
    "F": "#7f7f7f",
    "F_top": "#9467bd",
    "F_dynamic": "#e377c2",
    "random": "#8c564b",
}


def _color(condition: str) -> str:
    """The colour of a condition's subspace (``D_rotate`` -> D's)."""
    return COLORS.get(condition, COLORS.get(condition.split("_")[0], "#333333"))


def _need(df: pd.DataFrame, cols, what: str) -> None:
    if df is None or df.empty or any(c not in df.columns for c in cols):
        raise InputError(f"{what} needs a non-empty table with columns {list(cols)}")


def plot_energy_pr(layers: pd.DataFrame):
    """Mean energy share of P, D, S, F per layer (left) and the PR of D and S with the interface
    dimension ``1 + PR_D + PR_S`` and the ranks (right)."""
    import matplotlib.pyplot as plt

    _need(layers, ["layer", "energy_P", "pr_D", "pr_S", "interface_dim"], "plot_energy_pr")
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 4.0), layout="constrained")
    bottom = np.zeros(len(layers))
    for p in PARTS:
        a.bar(layers["layer"], layers[f"energy_{p}"], bottom=bottom, color=COLORS[p], label=p, width=0.85)
        bottom += layers[f"energy_{p}"].to_numpy()
    a.set(xlabel="layer (state after n blocks)", ylabel="share of ||h||²", ylim=(0, 1.02), title="energy per part")
    _legend_below(a, ncol=4)
    b.plot(layers["layer"], layers["interface_dim"], "k-", label="1 + PR_D + PR_S")
    b.plot(layers["layer"], layers["pr_D"], color=COLORS["D"], label="PR_D")
    b.plot(layers["layer"], layers["pr_S"], color=COLORS["S"], label="PR_S")
    b.plot(layers["layer"], layers["k_D"], ":", color=COLORS["D"], label="k_D")
    b.plot(layers["layer"], layers["k_S"], ":", color=COLORS["S"], label="k_S")
    b.set(xlabel="layer", ylabel="dimension", title="interface dimension")
    _legend_below(b, ncol=3)
    return fig


def _legend_below(ax, ncol: int) -> None:
    """The axes' legend under it, clear of the data (the constrained layout makes room)."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=ncol, fontsize=8, frameon=False)


def _per_part(parts: pd.DataFrame, panels: dict[str, str], zero_line: bool):
    """One panel per column of ``panels`` (column -> axis label), a line per part over layers."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.4), squeeze=False)
    for ax, (col, label) in zip(axes[0], panels.items()):
        for p in PARTS:
            g = parts[parts["part"] == p]
            ax.plot(g["layer"], g[col], color=COLORS[p], label=p, marker=".")
        if zero_line:
            ax.axhline(0, color="k", lw=0.6)
        ax.set(xlabel="layer", ylabel=label)
    axes[0][0].legend(ncol=4, fontsize=8)
    fig.tight_layout()
    return fig


def plot_complexity(parts: pd.DataFrame):
    """Curvature ratio (mean 8-NN / mean pairwise distance) and TwoNN dimension per part and layer:
    the paper's gradient from a folded D to a flat F."""
    _need(parts, ["layer", "part", "curvature_ratio", "twonn"], "plot_complexity")
    return _per_part(parts, {"curvature_ratio": "curvature ratio (low: folded)", "twonn": "TwoNN dimension"}, False)


def plot_discrimination(parts: pd.DataFrame):
    """Silhouette of the prompt groups and Cohen's d of the within-minus-between cosine gap against
    label shuffles, per part and layer (below 0: anti-discriminative)."""
    _need(parts, ["layer", "part", "silhouette", "gap_cohens_d"], "plot_discrimination")
    return _per_part(
        parts, {"silhouette": "silhouette (cosine)", "gap_cohens_d": "cosine gap, Cohen's d vs shuffles"}, True
    )


def plot_divergence(df: pd.DataFrame, max_step: int | None = None):
    """Histogram of the first divergent generated token per condition (unchanged continuations in
    the last bin, marked)."""
    import matplotlib.pyplot as plt

    _need(df, ["condition", "divergence_step", "identical"], "plot_divergence")
    top = int(max_step or (df["divergence_step"].max() if df["divergence_step"].notna().any() else 1)) + 1
    conds = list(dict.fromkeys(df["condition"]))
    fig, axes = plt.subplots(1, len(conds), figsize=(2.6 * len(conds), 2.8), sharey=True, squeeze=False)
    for ax, c in zip(axes[0], conds):
        g = df[df["condition"] == c]
        steps = g["divergence_step"].fillna(top).clip(upper=top).astype(int)
        ax.hist(steps, bins=np.arange(top + 2) - 0.5, color=_color(c))
        ax.set(title=f"{c} (rank {int(g['rank'].iloc[0])})", xlabel="first divergent token")
        ax.axvline(top - 0.5, color="k", lw=0.5, ls=":")
    axes[0][0].set_ylabel("prompts")
    fig.tight_layout()
    return fig


def plot_single_pass(summary: pd.DataFrame, angles: pd.DataFrame):
    """Mean KL of the next token per single-pass condition with its standard error (left, log
    scale), and the mean angle between the clean and the edited part at each later state (right:
    how much of the edit the later layers undo)."""
    import matplotlib.pyplot as plt

    _need(summary, ["condition", "kl_mean", "kl_sem"], "plot_single_pass")
    _need(angles, ["condition", "state", "angle_mean"], "plot_single_pass")
    fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 4.2), layout="constrained")
    conds = list(summary["condition"])
    a.bar(
        range(len(conds)),
        summary["kl_mean"].clip(lower=1e-6),
        yerr=summary["kl_sem"].fillna(0),
        color=[_color(c) for c in conds],
        capsize=3,
    )
    a.set_xticks(range(len(conds)), conds, rotation=30, ha="right", fontsize=8)
    a.set(yscale="log", ylabel="KL(clean || edited), nats", title="next-token KL")
    markers = "osv^DxP*"  # conditions of one subspace share its colour: a marker each tells them apart
    for i, c in enumerate(conds):
        g = angles[angles["condition"] == c]
        b.plot(
            g["state"],
            g["angle_mean"],
            marker=markers[i % len(markers)],
            ms=4,
            color=_color(c),
            ls="--" if "F" in c else "-",
            label=c,
        )
    b.set(xlabel="state (after n blocks)", ylabel="angle, clean vs edited part (deg)", title="what later layers keep")
    _legend_below(b, ncol=3)
    return fig


def plot_f_dynamics(dynamics: pd.DataFrame, steps: pd.DataFrame, layers=None):
    """Along the unedited continuations: the static share of F's energy and F's share of the
    state per layer (left), and ``cos(F_t, F_0)`` per step at a few layers (right)."""
    import matplotlib.pyplot as plt

    _need(dynamics, ["layer", "static_share", "f_share_of_state"], "plot_f_dynamics")
    _need(steps, ["layer", "step", "cos_to_first"], "plot_f_dynamics")
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
    a.plot(dynamics["layer"], dynamics["static_share"], "k-", marker=".", label="static share of F (mean over steps)")
    a.plot(dynamics["layer"], 1 - dynamics["static_share"], "k:", label="dynamic share")
    a.plot(dynamics["layer"], dynamics["f_share_of_state"], color=COLORS["F"], marker=".", label="F share of ||h||²")
    a.set(xlabel="layer", ylabel="share", ylim=(0, 1.02), title="F during generation")
    a.legend(fontsize=8)
    all_layers = sorted(steps["layer"].unique())
    pick = layers or [all_layers[i] for i in np.unique(np.linspace(0, len(all_layers) - 1, 4).round().astype(int))]
    for l in pick:
        g = steps[steps["layer"] == l]
        b.plot(g["step"], g["cos_to_first"], label=f"layer {l}")
    b.set(xlabel="generated step", ylabel="cos(F_t, F_0)", title="F against its first step")
    b.legend(fontsize=8)
    fig.tight_layout()
    return fig
