"""Figures of the tokenwise analysis: geometry per layer and class, residual angles, error vs KL."""

from __future__ import annotations

import pandas as pd

from .fits import ANGLE_THRESHOLD, CLASSES
from ..errors import InputError

__all__ = ["plot_layer_geometry", "plot_residual_angles", "plot_error_vs_kl"]

_COLORS = dict(zip(CLASSES, ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#7f7f7f", "#9467bd")))  # one per class


def plot_layer_geometry(geometry: pd.DataFrame):
    """Median relative error ``||r|| / ||Delta_full||``, median cos(Delta_full, Delta_tok) and the
    share of residual angles above 60° per layer, one line per class."""
    import matplotlib.pyplot as plt

    from ..plotting import WIDTH, integer_ticks, legend_outside, style

    if geometry.empty:
        raise InputError("plot_layer_geometry needs a non-empty geometry table")
    panels = (
        ("rel_error", "median ||r|| / ||Δ_full||"),
        ("cos_update", "median cos(Δ_full, Δ_tok)"),
        ("share_angle_above_60", f"share of residual angles > {ANGLE_THRESHOLD:.0f}°"),
    )
    fig, axes = plt.subplots(1, 3, figsize=(WIDTH, 3.0), layout="constrained")
    for ax, (col, title) in zip(axes, panels):
        for c, g in geometry.groupby("class", sort=False):
            g = g.sort_values("layer")
            ax.plot(g["layer"], g[col], marker="o", ms=3, color=_COLORS.get(c), label=c)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("layer map l (h_l -> h_l+1)")
        ax.grid(alpha=0.3)
        integer_ticks(ax.xaxis)
    legend_outside(fig, title="map class")
    style(fig)
    return fig


def plot_residual_angles(tokens: pd.DataFrame, layer: int | None = None):
    """Histogram of the residual's angle to Delta_tok (degrees) per class at ``layer`` (default:
    the layer with the largest median error), the 60° line marked."""
    import matplotlib.pyplot as plt

    from ..plotting import WIDTH, legend_outside, style

    if layer is None:
        layer = int(tokens.groupby("layer")["rel_error"].median().idxmax())
    d = tokens[tokens["layer"] == layer]
    if d.empty:
        raise InputError(f"no tokens at layer {layer}")
    fig, ax = plt.subplots(figsize=(WIDTH * 0.7, 3.0), layout="constrained")
    for c, g in d.groupby("class", sort=False):
        ax.hist(g["residual_angle"], bins=36, range=(0, 180), histtype="step", lw=1.5, color=_COLORS.get(c), label=c)
    ax.axvline(ANGLE_THRESHOLD, color="0.4", ls="--", lw=1)
    ax.set_xlabel(f"angle between r and Δ_tok (degrees), layer map {layer}")
    ax.set_ylabel("tokens")
    legend_outside(fig, title="map class")
    style(fig)
    return fig


def plot_error_vs_kl(tokens: pd.DataFrame, correlation: pd.DataFrame | None = None, layer: int | None = None):
    """Relative error vs KL of patching (log-log) at ``layer`` (default: the middle one), one
    colour per class, Spearman's rho in the legend."""
    import matplotlib.pyplot as plt

    from ..plotting import WIDTH, legend_outside, plain_log_ticks, style

    layers = sorted(tokens["layer"].unique())
    layer = layers[len(layers) // 2] if layer is None else layer
    d = tokens[tokens["layer"] == layer]
    if d.empty:
        raise InputError(f"no tokens at layer {layer}")
    fig, ax = plt.subplots(figsize=(WIDTH * 0.7, 3.4), layout="constrained")
    for c, g in d.groupby("class", sort=False):
        label = c
        if correlation is not None:
            r = correlation[
                (correlation["layer"] == layer) & (correlation["class"] == c) & (correlation["target"] == "kl")
            ]
            if len(r):
                label = f"{c} (rho {r['spearman'].iloc[0]:.2f})"
        ax.scatter(
            g["rel_error"].clip(lower=1e-6), g["kl"].clip(lower=1e-9), s=8, alpha=0.6, color=_COLORS.get(c), label=label
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax.xaxis)  # 0.2, 0.5, 1: not 2x10^-1, 3x10^-1, ... on top of each other
    ax.set_xlabel(f"||r|| / ||Δ_full|| at layer map {layer}")
    ax.set_ylabel("KL(p_clean || p_patched), nats")
    ax.grid(alpha=0.3)
    legend_outside(fig, title="map class")
    style(fig)
    return fig
