"""The figures of the directional decomposition: the parallel-ratio profile per layer (Figure 1),
ΔPPL against ``s_par`` / ``s_perp`` (Figure 3), per-head alpha and sensitivity maps (Figure 7), the
original and closed-form-edited attention diagonal (Figure 4), all matplotlib in
:mod:`tlgeo.plotting`'s style, and the circuitsvis view of one layer's pattern before and after the
closed-form edit."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Int
from torch import Tensor

from ..errors import InputError
from ..hooks.adapter import resolve_layers
from ..models import Model, input_device
from ..plotting import attention_rows, attention_view
from .closed_form import _check_variant, closed_form_hooks
from .heads import ALL
from .observe import check_tokens

__all__ = [
    "plot_profile",
    "plot_sweep",
    "plot_head_maps",
    "plot_diagonal",
    "attention_before_after",
    "attention_before_after_rows",
    "attention_view_signed",
]


def plot_profile(summary: pd.DataFrame, stat: str = "parallel_ratio_median"):
    """Per-layer ``stat`` (a :func:`.observe.summarize_profile` column), one line per site,
    log y axis with a dashed line at 1 (parallel part as large as the perpendicular).
    Integer layer ticks; the legend sits right of the axes."""
    import matplotlib.pyplot as plt

    from ..plotting import WIDTH, integer_ticks, legend_outside, plain_log_ticks, site_color, style

    fig, ax = plt.subplots(figsize=(WIDTH, 4.0), layout="constrained")
    for site, g in summary.groupby("site"):
        g = g.sort_values("layer")
        ax.plot(g["layer"], g[stat], marker="o", ms=3, label=site, color=site_color(site))
    ax.axhline(1.0, ls="--", c="grey", lw=1, label="1: parallel = perp.")
    ax.set_yscale("log")
    plain_log_ticks(ax.yaxis)
    ax.set_xlabel("layer")
    ax.set_ylabel(stat.replace("_", " "))
    ax.grid(alpha=0.3, which="major")
    integer_ticks(ax.xaxis)
    legend_outside(fig, title="site")
    style(fig)
    return fig


def plot_sweep(df: pd.DataFrame, *, title: str | None = None):
    """Figure 3: one panel per axis, one line per site, ΔPPL against the scale.

    The y axis is symlog when ΔPPL spans more than two decades (removal of the
    perpendicular part explodes perplexity); dashed lines mark the unedited
    point (scale 1, ΔPPL 0), which every line passes through: a scale of 1 is the unedited model (a no-op
    edit leaves the logits unchanged), so a grid without it gets that point, drawn hollow. One legend for both
    panels, right of them.
    """
    import matplotlib.pyplot as plt

    from ..plotting import WIDTH, legend_outside, site_color, style

    need = {"site", "axis", "scale", "delta_ppl"}
    if df.empty or not need <= set(df.columns):
        raise InputError(f"plot_sweep needs a non-empty frame with columns {sorted(need)}")
    axes_present = [a for a in ("s_par", "s_perp") if (df["axis"] == a).any()]
    fig, axs = plt.subplots(
        1,
        len(axes_present),
        figsize=(WIDTH if len(axes_present) > 1 else WIDTH * 0.65, 4),
        squeeze=False,
        layout="constrained",
    )
    for ax, axis in zip(axs[0], axes_present):
        part = df[df["axis"] == axis]
        for site, g in part.groupby("site", sort=False):
            g = g.sort_values("scale")
            x, y = g["scale"].to_list(), g["delta_ppl"].to_list()
            if 1.0 not in x:  # the unedited model, not run: ΔPPL 0 by definition
                i = sum(v < 1.0 for v in x)
                x, y = x[:i] + [1.0] + x[i:], y[:i] + [0.0] + y[i:]
                ax.plot([1.0], [0.0], marker="o", ms=5, mfc="white", color=site_color(site), zorder=3)
            ax.plot(x, y, marker="o", ms=3, label=site, color=site_color(site))
        d = part["delta_ppl"].abs()
        big, small = d.max(), d[d > 0].min() if (d > 0).any() else 1.0
        if big > 100 * max(small, 1e-3) or big > 50:
            ax.set_yscale("symlog", linthresh=1.0)  # linear within one PPL point
        ax.axvline(1.0, ls="--", c="gray", lw=1)
        ax.axhline(0.0, ls="--", c="gray", lw=1)
        ax.set_xlabel(axis)
        ax.set_ylabel("ΔPPL vs unedited")
        ax.set_title(f"scaling {axis}" + (" (s_perp = 1)" if axis == "s_par" else " (s_par = 1)"))
        ax.grid(alpha=0.3)
    legend_outside(fig, title="site")
    if title:
        fig.suptitle(title)
    style(fig)
    return fig


def plot_head_maps(
    alpha_map: pd.DataFrame, sensitivity: pd.DataFrame | None = None, *, q_level: float = 0.05, axes=None
):
    """Heatmaps (layer x head): mean ``alpha`` (diverging, centred at 0) and, when given,
    the single-head ``delta_loss`` with cells of ``q < q_level`` marked ``*``.
    Layers and heads are tick-labelled with integers (every layer up to 40 rows,
    else an integer locator). Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    from ..plotting import WIDTH, integer_ticks, style

    panels = 1 if sensitivity is None else 2
    if axes is None:
        height = min(max(0.2 * alpha_map["layer"].nunique() + 1.8, 3.0), 9.0)
        fig, axes = plt.subplots(
            1, panels, figsize=(WIDTH if panels == 2 else WIDTH * 0.55, height), squeeze=False, layout="constrained"
        )
        axes = axes[0]
    fig = axes[0].figure

    def heat(ax, grid: pd.DataFrame, label: str, title: str):
        vals = grid.to_numpy(dtype=float)
        lim = float(np.nanmax(np.abs(vals))) if np.isfinite(vals).any() else 1.0
        lim = lim or 1.0
        im = ax.imshow(vals, cmap="RdBu_r", norm=TwoSlopeNorm(0.0, -lim, lim), aspect="auto", interpolation="nearest")
        for n, set_ticks, labels, axis in (
            (grid.shape[1], ax.set_xticks, grid.columns, ax.xaxis),
            (grid.shape[0], ax.set_yticks, grid.index, ax.yaxis),
        ):
            if n <= 40:
                set_ticks(range(n), [str(int(v)) for v in labels])
            else:  # too many to label each: integer positions, labelled with their layer / head
                integer_ticks(axis)
                axis.set_major_formatter(
                    lambda x, _pos, _l=list(labels): str(int(_l[int(x)])) if 0 <= int(x) < len(_l) else ""
                )
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(title)
        fig.colorbar(im, ax=ax, label=label)
        return vals

    a = alpha_map.pivot(index="layer", columns="head", values="alpha_mean")
    heat(axes[0], a, "mean alpha", f"mean alpha per head ({alpha_map['site'].iloc[0]})")
    if sensitivity is not None:
        single = sensitivity[sensitivity["head"] != ALL].copy()
        single["head"] = single["head"].astype(int)
        d = single.pivot(index="layer", columns="head", values="delta_loss")
        q = single.pivot(index="layer", columns="head", values="q")
        heat(axes[1], d, "Δ loss (nats)", "loss change, parallel part removed in one head")
        for i in range(q.shape[0]):
            for j in range(q.shape[1]):
                if q.iat[i, j] < q_level:
                    axes[1].text(j, i, "*", ha="center", va="center", fontsize=11, color="k")
    style(fig)
    return fig


def plot_diagonal(diag: pd.DataFrame, variant: str, layer: int, seq: int = 0, head: int | None = None):
    """Heatmaps of the original and the closed-form-edited diagonal ``A_tt`` (heads x positions).

    ``head`` given: one head (the paper's Figure 4 shows one head). A diverging
    colour map centred on 0, shared by both panels; the edited diagonal may be
    negative. Integer position ticks. Returns the matplotlib ``Figure``.
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    from ..plotting import WIDTH, integer_ticks, style

    d = diag[(diag["variant"] == variant) & (diag["layer"] == layer) & (diag["seq"] == seq)]
    if head is not None:
        d = d[d["head"] == head]
    if d.empty:
        raise InputError(
            f"no diagonal values for variant={variant!r}, layer={layer}, seq={seq}, "
            f"head={head}; have variants {sorted(diag['variant'].unique())}, "
            f"layers {sorted(diag['layer'].unique())}"
        )
    before = d.pivot(index="head", columns="pos", values="a_self")
    after = d.pivot(index="head", columns="pos", values="a_self_new")
    lo = float(min(before.values.min(), after.values.min(), -1e-6))
    hi = float(max(before.values.max(), after.values.max(), 1e-6))
    norm = TwoSlopeNorm(vmin=lo, vcenter=0.0, vmax=hi)
    fig, axes = plt.subplots(
        2, 1, figsize=(WIDTH, min(1.6 + 0.45 * len(before) * 2, 9.0)), sharex=True, layout="constrained"
    )
    for ax, frame, title in ((axes[0], before, "original A_tt"), (axes[1], after, "A_tt + Delta A_tt")):
        im = ax.imshow(frame.values, aspect="auto", cmap="RdBu_r", norm=norm, interpolation="nearest")
        ax.set_yticks(range(len(frame)), [f"h{h}" for h in frame.index])
        ax.set_title(f"{title}  [{frame.values.min():.2f}, {frame.values.max():.2f}]", fontsize=9)
    axes[1].set_xlabel("position t")
    integer_ticks(axes[1].xaxis)
    fig.colorbar(im, ax=axes, shrink=0.8, label="diagonal weight")
    fig.suptitle(f"closed-form diagonal, {variant}, layer {layer}")
    style(fig)
    return fig


def attention_before_after_rows(
    model: Model,
    tokens: Int[Tensor, "batch pos"],
    layer: int,
    variant: str = "value_excl_self",
    s_par: float = 0.0,
    seq: int = 0,
    heads: Sequence[int] | None = None,
) -> pd.DataFrame:
    """One layer's attention pattern before and after the closed-form edit (only that layer edited), as
    :func:`tlgeo.plotting.attention_rows` (views ``"h0 before"``, ``"h0 after"``, ...): what
    :func:`attention_before_after` draws, kept in a result so that a report draws it without the model."""
    tokens = check_tokens(model, tokens)
    _check_variant(variant)
    resolve_layers(model.cfg, layer)
    name = f"blocks.{layer}.attn.hook_pattern"
    got: dict = {}

    def cap(key):
        def fn(t: Tensor, hook) -> None:
            got[key] = t[seq].detach().float().cpu()

        return fn

    device = input_device(model)
    toks = tokens.to(device)
    with torch.inference_mode():
        model.run_with_hooks(toks, return_type=None, fwd_hooks=[(name, cap("before"))])
        model.run_with_hooks(
            toks,
            return_type=None,
            fwd_hooks=closed_form_hooks(model, variant, s_par, layers=layer, skip_first=0) + [(name, cap("after"))],
        )
    heads = list(range(model.cfg.n_heads)) if heads is None else list(heads)
    pats = torch.stack([got[k][h] for h in heads for k in ("before", "after")])
    names = [f"h{h} {k}" for h in heads for k in ("before", "after")]
    return attention_rows(pats.numpy(), names, model.to_str_tokens(tokens[seq]))


def attention_before_after(
    model: Model,
    tokens: Int[Tensor, "batch pos"],
    layer: int,
    variant: str = "value_excl_self",
    s_par: float = 0.0,
    seq: int = 0,
    heads: Sequence[int] | None = None,
):
    """circuitsvis ``attention_heads`` of one layer's pattern before and after the closed-form
    edit (only that layer edited; heads labelled ``"h0 before"``, ``"h0 after"``, ...)."""
    return attention_view_signed(attention_before_after_rows(model, tokens, layer, variant, s_par, seq, heads))


def attention_view_signed(rows: pd.DataFrame):
    """:func:`tlgeo.plotting.attention_view` on a scale from the smallest weight (the closed form allows
    negative ones) to 1."""
    return attention_view(rows, min_value=float(min(rows["weight"].min(), -1e-6)), max_value=1.0)
