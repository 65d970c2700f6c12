"""The figures of circuit discovery, from its tables alone: the circuit (nodes by block, edges coloured by the part of
the sender's write that carries their score, line style by the receiver's input, width by ``|score|``) and the
faithfulness curve."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..plotting import FONT, WIDTH, legend_outside, plain_log_ticks, style

__all__ = ["circuit_figure", "faithfulness_figure", "dominant_part"]

PART_COLORS = {"perp": "#1f77b4", "par": "#ff7f0e"}
INPUT_STYLES = {"q": ":", "k": "--", "v": "-.", "mlp": "-", "logits": "-"}


def dominant_part(edges: pd.DataFrame) -> pd.Series:
    """Per edge, ``par`` or ``perp``: the part of the sender's change (along / across the receiver's residual)
    whose score is larger in size (``perp`` where the parts are unknown: exact scores)."""
    par, perp = edges["score_par"].abs(), edges["score_perp"].abs()
    return pd.Series(np.where(par.fillna(-1) > perp.fillna(0), "par", "perp"), index=edges.index)


def _node_xy(layer: int, head: int, kind: str, n_heads: int, n_layers: int) -> tuple[float, float]:
    if kind == "input":
        return -1.0, (n_heads - 1) / 2
    if kind == "logits":
        return float(n_layers), (n_heads - 1) / 2
    return float(layer), float(n_heads if head < 0 else head)


def circuit_figure(edges: pd.DataFrame, k: int, *, title: str = ""):
    """The ``k`` top edges of one task's ``edges`` table (one method): senders and receivers placed by block (x) and
    head (y; the MLP above the heads), each edge a line of width ``|score|``, coloured by its dominant part and styled
    by the receiver's input (a key or value receiver is drawn at its key/value head)."""
    import matplotlib.pyplot as plt

    top = edges.nsmallest(k, "rank")
    n_heads = int(max(edges["sender_head"].max(), edges["receiver_head"].max())) + 1
    n_layers = int(edges["receiver_layer"].max())
    fig, ax = plt.subplots(figsize=(WIDTH, 1.5 + 0.45 * (n_heads + 1)), layout="constrained")
    size = top["score"].abs()
    widths = 0.5 + 4.5 * size / max(float(size.max()), 1e-12) if len(top) else size
    parts = dominant_part(top)
    for (_, e), w, part in zip(top.iterrows(), widths, parts):
        x0, y0 = _node_xy(e.sender_layer, e.sender_head, e.sender_kind, n_heads, n_layers)
        kind = "logits" if e.receiver_input == "logits" else "node"
        x1, y1 = _node_xy(e.receiver_layer, e.receiver_head, kind, n_heads, n_layers)
        x1 -= 0.12  # the receiver's input side
        ax.plot(
            [x0, x1],
            [y0, y1],
            ls=INPUT_STYLES[e.receiver_input],
            lw=float(w),
            color=PART_COLORS[part],
            alpha=0.75,
            label=f"{part}, into {e.receiver_input}",
        )
    xs = [-1] + [l for l in range(n_layers) for _ in range(n_heads + 1)] + [n_layers]
    ys = [(n_heads - 1) / 2] + [h for _ in range(n_layers) for h in range(n_heads + 1)] + [(n_heads - 1) / 2]
    ax.scatter(xs, ys, s=18, color="black", zorder=3)
    ax.set_xticks(range(-1, n_layers + 1), ["input", *map(str, range(n_layers)), "logits"])
    ax.set_yticks(range(n_heads + 1), [*map(str, range(n_heads)), "MLP"])
    ax.set_xlabel("block")
    ax.set_ylabel("head")
    ax.set_title(title or f"the {k} top edges (width: |score|)", fontsize=FONT + 1)
    legend_outside(fig, title="dominant part, receiver input")
    style(fig)
    return fig


def faithfulness_figure(curve: pd.DataFrame, levels=(0.8, 0.9), *, label: str = ""):
    """The share of the clean - corrupted gap recovered against the edges kept (log axis; k = 0 left out), with
    the levels marked."""
    import matplotlib.pyplot as plt

    c = curve[curve["k"] > 0].sort_values("k")
    fig, ax = plt.subplots(figsize=(WIDTH, 3.6), layout="constrained")
    ax.plot(c["k"], c["recovered"], marker="o", ms=3, label=label or "circuit")
    for lv in levels:
        ax.axhline(lv, color="gray", lw=0.8, ls="--")
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    ax.set_xlabel("edges kept (k)")
    ax.set_ylabel("share of the gap recovered")
    legend_outside(fig)
    style(fig)
    return fig
