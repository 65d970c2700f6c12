"""Figures of the four-geometries analysis: a block x pair heatmap of the correlations, and scatters of the
strongest pairs coloured by block."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import InputError

__all__ = ["plot_relations", "plot_pairs", "token_view"]


def plot_relations(relations: pd.DataFrame, value: str = "rho", top: int | None = 24):
    """Heatmap of ``value`` (rho, rho_partial, rho_partial_atypical or rho_shuffled): one row per pair of quantities
    (the ``top`` by mean |value| over blocks; all with ``None``), one column per block; x: the block's CI includes
    0."""
    import matplotlib.pyplot as plt

    from ..plotting import WIDTH, style

    if relations.empty:
        raise InputError("plot_relations needs a non-empty relations table")
    rel = relations.assign(pair=relations["a"] + " ~ " + relations["b"])
    grid = rel.pivot(index="pair", columns="layer", values=value)
    grid = grid.reindex(grid.abs().mean(1).sort_values(ascending=False).index)
    if top is not None:
        grid = grid.head(top)
    covers = (
        rel.assign(zero=(rel["ci_low"] <= 0) & (rel["ci_high"] >= 0))
        .pivot(index="pair", columns="layer", values="zero")
        .reindex(grid.index)
    )
    fig, ax = plt.subplots(figsize=(WIDTH, max(3.0, 0.22 * len(grid) + 1.3)), layout="constrained")
    im = ax.imshow(grid.to_numpy(float), aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ys, xs = np.nonzero(covers.fillna(True).to_numpy(bool))
    ax.scatter(xs, ys, marker="x", s=10, color="0.35", linewidths=0.7)
    ax.set_xticks(range(grid.shape[1]), [str(c) for c in grid.columns])
    ax.set_yticks(range(len(grid)), grid.index)
    ax.set_xlabel("block")
    shown = "" if top is None or len(grid) < top else f", the {top} strongest pairs"
    ax.set_title(f"Spearman {value.replace('rho', 'ρ').replace('_', ' ')} per block{shown} (x: 95% CI includes 0)")
    fig.colorbar(im, ax=ax, shrink=0.8, label=value, pad=0.01)
    style(fig)
    ax.tick_params(axis="y", labelsize=8)
    return fig


def plot_pairs(tokens: pd.DataFrame, pairs: pd.DataFrame, max_points: int = 3000, seed: int = 0):
    """One scatter per pair of ``pairs`` (columns ``a, b``), tokens coloured by block, ranks on both axes."""
    import matplotlib.pyplot as plt

    from ..plotting import WIDTH, legend_outside, style

    if pairs.empty:
        raise InputError("plot_pairs needs at least one pair")
    n = len(pairs)
    fig, axes = plt.subplots(1, n, figsize=(WIDTH, WIDTH / max(n, 2) + 0.6), layout="constrained", squeeze=False)
    cmap = plt.get_cmap("viridis")
    layers = sorted(tokens["layer"].unique())
    for ax, (_, p) in zip(axes[0], pairs.iterrows()):
        df = tokens.dropna(subset=[p["a"], p["b"]])
        df = df.sample(min(len(df), max_points), random_state=seed)
        for i, (layer, g) in enumerate(df.groupby("layer")):
            ax.scatter(
                g[p["a"]].rank(pct=True),
                g[p["b"]].rank(pct=True),
                s=3,
                alpha=0.4,
                color=cmap(i / max(1, len(layers) - 1)),
                label=f"block {layer}",
            )
        ax.set_xlabel(f"rank of {p['a']}")
        ax.set_ylabel(f"rank of {p['b']}")
        ax.set_title(f"{p['a']} ~ {p['b']}", fontsize=10)
    legend_outside(fig, title="block", markerscale=3)
    style(fig)
    return fig


def token_view(tokens: pd.DataFrame, tokenizer, quantity: str, layer: int, window: int = 0):
    """circuitsvis ``colored_tokens`` of one window's ``quantity`` at block ``layer`` (the text as the model
    read it, BOS left out: the table's ``text``, or the ids decoded by ``tokenizer`` where it has none)."""
    import circuitsvis as cv

    if quantity not in tokens:
        raise InputError(
            f"no quantity {quantity!r}; the table has {[c for c in tokens if c not in ('layer', 'index')]}"
        )
    df = tokens[(tokens["layer"] == layer) & (tokens["window"] == window)].sort_values("position")
    if df.empty:
        raise InputError(f"no tokens of window {window} at block {layer}")
    if "text" in df and df["text"].notna().all():
        text = df["text"].astype(str).tolist()
    elif tokenizer is not None:
        text = [tokenizer.decode([int(t)]) for t in df["token"]]
    else:
        raise InputError("the tokens table has no text and no tokenizer was given")
    return cv.tokens.colored_tokens(tokens=text, values=df[quantity].fillna(0).astype(float).tolist())
