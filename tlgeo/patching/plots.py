"""Figures of the patching analysis, in :mod:`tlgeo.plotting`'s style.

* :func:`plot_effects`: one layer x head heatmap per head component (one colour scale for all,
  diverging at 0) and the MLP components per layer beside them.
* :func:`plot_paths`: path patching, one sender x receiver heatmap per receiver input (q, k, v, logits),
  significant paths marked.
* :func:`plot_attribution_vs_exact`: attribution against exact effects, one panel per
  component, points coloured by layer (where the linear approximation fails shows as the
  early layers leaving the diagonal).
* :func:`top_heads_view`: circuitsvis ``attention_heads`` of the heads with the largest
  effects on one clean prompt, each named with its effect (:func:`top_heads_view_of`: the same from
  the attention rows a patching run stores, :func:`head_attention_rows`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from .components import COMPONENTS, HEAD_COMPONENTS, LAYER_COMPONENTS
from ..errors import InputError

__all__ = [
    "plot_effects",
    "plot_paths",
    "plot_attribution_vs_exact",
    "top_heads",
    "head_attention_rows",
    "top_heads_view",
    "top_heads_view_of",
]


def _select(effects: pd.DataFrame, **match) -> pd.DataFrame:
    df = effects
    for k, v in match.items():
        if v is None:
            continue
        if k not in df.columns:
            raise InputError(f"effects have no column {k!r}")
        df = df[df[k] == v]
    if df.empty:
        raise InputError(
            f"no effects for {match}; the table has tasks {sorted(effects['task'].unique())}, "
            f"methods {sorted(effects['method'].unique())}, directions "
            f"{sorted(effects['direction'].unique())}"
        )
    return df


def plot_effects(
    effects: pd.DataFrame,
    task: str,
    *,
    method: str = "exact",
    direction: str = "denoise",
    components: Sequence[str] | None = None,
    model: str | None = None,
):
    """Heatmaps of the effects of ``task`` (layer x head, one panel per head component) and one panel of
    the MLP components per layer. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    from ..plotting import WIDTH, integer_ticks, legend_outside, site_color, style

    df = _select(effects, task=task, method=method, direction=direction, model=model)
    have = [c for c in COMPONENTS if c in set(df["component"])]
    comps = [c for c in (components or have) if c in have]
    heads = [c for c in comps if c in HEAD_COMPONENTS]
    layer = [c for c in comps if c in LAYER_COMPONENTS]
    panels = len(heads) + (1 if layer else 0)
    if not panels:
        raise InputError(f"none of the components {list(components or [])} has effects; have {have}")
    cols = min(panels, 4)
    rows = -(-panels // cols)
    n_layers = int(df["layer"].max()) + 1
    height = rows * min(max(0.12 * n_layers + 1.4, 2.6), 6.0)
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH, height), squeeze=False, layout="constrained")
    axes = axes.ravel()
    vals = df[df["component"].isin(heads)]["effect"].to_numpy(dtype=float)
    lim = float(np.nanmax(np.abs(vals))) if np.isfinite(vals).any() else 1.0
    norm = TwoSlopeNorm(0.0, -(lim or 1.0), lim or 1.0)
    im = None
    for ax, comp in zip(axes, heads):
        grid = df[df["component"] == comp].pivot(index="layer", columns="head", values="effect")
        im = ax.imshow(
            grid.to_numpy(dtype=float),
            cmap="RdBu_r",
            norm=norm,
            aspect="auto",
            interpolation="nearest",
            extent=(-0.5, grid.shape[1] - 0.5, grid.index.max() + 0.5, grid.index.min() - 0.5),
        )
        ax.set_title(comp)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        integer_ticks(ax.xaxis, ax.yaxis)
    if im is not None:
        fig.colorbar(im, ax=list(axes[: len(heads)]), label="effect (share of the gap)", shrink=0.8)
    if layer:
        ax = axes[len(heads)]
        for comp in layer:
            d = df[df["component"] == comp].sort_values("layer")
            ax.plot(
                d["effect"],
                d["layer"],
                marker="o",
                ms=3,
                label=comp,
                color=site_color("mlp") if comp == "mlp" else None,
            )
            if {"ci_low", "ci_high"} <= set(d.columns):
                ax.fill_betweenx(d["layer"], d["ci_low"], d["ci_high"], alpha=0.15)
        ax.axvline(0, color="0.6", lw=0.8)
        ax.invert_yaxis()
        ax.set_xlabel("effect")
        ax.set_ylabel("layer")
        ax.set_title("MLP")
        integer_ticks(ax.yaxis)
        legend_outside(fig, title="MLP")
    for ax in axes[panels:]:
        ax.set_visible(False)
    fig.suptitle(f"{task}: {method} patching, {direction}")
    style(fig)
    return fig


def _head_name(layer: int, head: int) -> str:
    return f"L{layer}" if head < 0 else f"L{layer}H{head}"


def plot_paths(
    paths: pd.DataFrame, task: str, *, direction: str = "denoise", component: str = "head", model: str | None = None
):
    """Path patching's effects of ``task``: per receiver input (q, k, v, then logits) a heatmap of senders (rows)
    x receivers (columns), one colour scale diverging at 0, a dot on each path with ``q < 0.05``. Returns the
    figure."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    from ..plotting import WIDTH, style

    df = _select(paths, task=task, direction=direction, component=component, model=model)
    inputs = [i for i in ("q", "k", "v", "logits") if i in set(df["receiver_input"])]
    senders = sorted({(int(l), int(h)) for l, h in zip(df["sender_layer"], df["sender_head"])})
    lim = float(np.nanmax(np.abs(df["effect"].to_numpy(dtype=float)))) or 1.0
    norm = TwoSlopeNorm(0.0, -lim, lim)
    widths = [
        max(1, df[df["receiver_input"] == i][["receiver_layer", "receiver_head"]].drop_duplicates().shape[0])
        for i in inputs
    ]
    fig, axes = plt.subplots(
        1,
        len(inputs),
        figsize=(WIDTH, min(1.2 + 0.28 * len(senders), 7.0)),
        squeeze=False,
        layout="constrained",
        gridspec_kw={"width_ratios": widths},
    )
    im = None
    for ax, inp in zip(axes[0], inputs):
        d = df[df["receiver_input"] == inp]
        receivers = sorted({(int(l), int(h)) for l, h in zip(d["receiver_layer"], d["receiver_head"])})
        grid = np.full((len(senders), len(receivers)), np.nan)
        sig = np.zeros_like(grid, dtype=bool)
        for _, r in d.iterrows():
            i, j = (
                senders.index((int(r["sender_layer"]), int(r["sender_head"]))),
                receivers.index((int(r["receiver_layer"]), int(r["receiver_head"]))),
            )
            grid[i, j], sig[i, j] = r["effect"], bool(r.get("significant", False))
        im = ax.imshow(grid, cmap="RdBu_r", norm=norm, aspect="auto", interpolation="nearest")
        ys, xs = np.nonzero(sig)
        ax.scatter(xs, ys, s=6, color="black")
        ax.set_xticks(
            range(len(receivers)),
            ["logits" if inp == "logits" else _head_name(*r) for r in receivers],
            rotation=90,
            fontsize=7,
        )
        ax.set_yticks(range(len(senders)), [_head_name(*s) for s in senders], fontsize=7)
        ax.set_title(inp if inp == "logits" else f"receiver {inp}")
    axes[0][0].set_ylabel("sender")
    if im is not None:
        fig.colorbar(im, ax=list(axes[0]), label="effect (share of the gap)", shrink=0.8)
    fig.suptitle(f"{task}: path patching of {component}, {direction} (dot: q < 0.05)")
    style(fig)
    return fig


def plot_attribution_vs_exact(
    effects: pd.DataFrame,
    task: str,
    *,
    direction: str = "denoise",
    components: Sequence[str] | None = None,
    model: str | None = None,
):
    """Attribution (y) against exact (x) effects per (layer, head), one panel per component present in
    both methods, coloured by layer, with the diagonal. Returns the figure."""
    import matplotlib.pyplot as plt

    from ..plotting import WIDTH, style

    df = _select(effects, task=task, direction=direction, model=model)
    key = ["component", "layer", "head"]
    ex = df[df["method"] == "exact"].set_index(key)["effect"]
    at = df[df["method"] == "attribution"].set_index(key)["effect"]
    both = pd.concat({"exact": ex, "attribution": at}, axis=1, join="inner").dropna().reset_index()
    if both.empty:
        raise InputError(f"{task} ({direction}): no component has both exact and attribution effects")
    comps = [c for c in (components or COMPONENTS) if c in set(both["component"])]
    cols = min(len(comps), 4)
    rows = -(-len(comps) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH, 2.6 * rows + 0.6), squeeze=False, layout="constrained")
    axes = axes.ravel()
    n_layers = int(both["layer"].max()) + 1
    sc = None
    for ax, comp in zip(axes, comps):
        d = both[both["component"] == comp]
        sc = ax.scatter(
            d["exact"], d["attribution"], c=d["layer"], cmap="viridis", vmin=0, vmax=max(n_layers - 1, 1), s=12
        )
        lo = float(min(d["exact"].min(), d["attribution"].min()))
        hi = float(max(d["exact"].max(), d["attribution"].max()))
        ax.plot([lo, hi], [lo, hi], color="0.5", lw=0.8, ls="--")
        r = np.corrcoef(d["exact"], d["attribution"])[0, 1] if len(d) > 2 else float("nan")
        ax.set_title(f"{comp} (r = {r:.2f})")
        ax.set_xlabel("exact")
        ax.set_ylabel("attribution")
    for ax in axes[len(comps) :]:
        ax.set_visible(False)
    if sc is not None:
        fig.colorbar(sc, ax=list(axes[: len(comps)]), label="layer", shrink=0.8)
    fig.suptitle(f"{task}: attribution vs exact patching, {direction}")
    style(fig)
    return fig


def top_heads(
    effects: pd.DataFrame,
    task: str,
    *,
    component: str = "head",
    method: str = "exact",
    direction: str = "denoise",
    k: int = 4,
) -> pd.DataFrame:
    """The ``k`` rows of ``effects`` (one task, method, direction and head component) with the largest
    ``|effect|``, largest first."""
    df = _select(effects, task=task, method=method, direction=direction, component=component)
    df = df[df["head"] >= 0]
    return df.assign(size=df["effect"].abs()).nlargest(k, "size").drop(columns="size")


def head_view_name(layer: int, head: int) -> str:
    """``L5H3``: a head's view in the stored attention rows."""
    return f"L{int(layer)}H{int(head)}"


def head_attention_rows(model, tokens, heads) -> pd.DataFrame:
    """The attention pattern of each ``(layer, head)`` of ``heads`` on the one prompt ``tokens [1, pos]``,
    as :func:`tlgeo.plotting.attention_rows` (views ``L<layer>H<head>``): what a report draws without the
    model."""
    import torch

    from ..models import input_device
    from ..plotting import attention_rows

    heads = list(dict.fromkeys((int(l), int(h)) for l, h in heads))
    names = {f"blocks.{l}.attn.hook_pattern" for l, _ in heads}
    with torch.inference_mode():
        _, cache = model.run_with_cache(tokens.to(input_device(model)), names_filter=lambda n: n in names)
    pats = torch.stack([cache[f"blocks.{l}.attn.hook_pattern"][0, h].float().cpu() for l, h in heads])
    return attention_rows(pats.numpy(), [head_view_name(l, h) for l, h in heads], model.to_str_tokens(tokens[0]))


def top_heads_view_of(
    rows: pd.DataFrame,
    effects: pd.DataFrame,
    task: str,
    *,
    component: str = "head",
    method: str = "exact",
    direction: str = "denoise",
    k: int = 4,
):
    """circuitsvis ``attention_heads`` of the ``k`` heads with the largest ``|effect|`` (:func:`top_heads`)
    from stored attention ``rows`` (:func:`head_attention_rows`), each named ``L<layer>H<head> <effect>``."""
    from ..plotting import attention_view

    top = top_heads(effects, task, component=component, method=method, direction=direction, k=k)
    return attention_view(
        rows,
        [head_view_name(l, h) for l, h in zip(top["layer"], top["head"])],
        [f"{head_view_name(l, h)} {e:+.2f}" for l, h, e in zip(top["layer"], top["head"], top["effect"])],
    )


def top_heads_view(
    model,
    task,
    effects: pd.DataFrame,
    *,
    component: str = "head",
    method: str = "exact",
    direction: str = "denoise",
    k: int = 4,
    prompt: int = 0,
):
    """circuitsvis ``attention_heads``: the clean attention pattern of the ``k`` heads with the largest
    ``|effect|`` of ``component`` on prompt ``prompt`` of ``task`` (a :class:`~.tasks.Task`), each
    named ``L<layer>H<head> <effect>``."""
    top = top_heads(effects, task.name, component=component, method=method, direction=direction, k=k)
    rows = head_attention_rows(model, task.clean[prompt : prompt + 1], zip(top["layer"], top["head"]))
    return top_heads_view_of(rows, effects, task.name, component=component, method=method, direction=direction, k=k)
