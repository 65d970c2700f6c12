"""The figure style every analysis shares: page-width sizes, legends outside the data,
integer layer ticks, one colour per site.

The report embeds figures at 110 dpi in a page about 1000 px wide, so a figure
:data:`WIDTH` inches wide (legend included) shows at its natural size, with
10-point text about 15 px high. Nothing here touches the data of a plot; :func:`attention_rows` /
:func:`attention_view` store
attention patterns as table rows (computed by an analysis's run) and draw them back as a circuitsvis view,
so a report section needs no model.
"""

from __future__ import annotations

from .errors import InputError

__all__ = [
    "WIDTH",
    "FONT",
    "SITE_COLORS",
    "site_color",
    "integer_ticks",
    "legend_outside",
    "plain_log_ticks",
    "style",
    "attention_rows",
    "attention_view",
]

WIDTH = 9.0  # inches, legend included: ~1000 px at the report's 110 dpi
FONT = 11  # points

# one colour per site in every figure (matplotlib's tab10 order)
SITE_COLORS = {
    "value_excl_self": "#1f77b4",
    "value_full": "#ff7f0e",
    "attn": "#2ca02c",
    "mlp": "#d62728",
    "block": "#9467bd",
    "diag": "#8c564b",
    "resid_post": "#e377c2",
}
_EXTRA = ("#7f7f7f", "#bcbd22", "#17becf")


def site_color(site: str) -> str:
    """The colour of ``site`` (a fixed one for the known sites, a stable fallback otherwise)."""
    return SITE_COLORS.get(site, _EXTRA[sum(map(ord, site)) % len(_EXTRA)])


def plain_log_ticks(axis) -> None:
    """Ticks at 1, 2, 5 x 10^k on a log ``axis``, written as plain numbers (0.05, 0.1, 0.2, ...)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def style(fig) -> None:
    """Readable text sizes on every axes of ``fig`` (ticks, labels, titles)."""
    for ax in fig.axes:
        ax.tick_params(labelsize=FONT - 1)
        ax.xaxis.label.set_size(FONT)
        ax.yaxis.label.set_size(FONT)
        ax.title.set_size(FONT + 1)


def integer_ticks(*axes) -> None:
    """Integer-only major ticks on each of ``axes`` (``ax.xaxis`` / ``ax.yaxis``): layers,
    heads and positions are counts, never 2.5."""
    from matplotlib.ticker import MaxNLocator

    for axis in axes:
        axis.set_major_locator(MaxNLocator(integer=True))


def legend_outside(fig, title: str | None = None, **kwargs):
    """One legend for ``fig``, to the right of all its axes, clear of the data.

    The handles of all axes are merged (one entry per label), so panels that
    share their lines get one legend. With the constrained layout (figures made
    with ``layout="constrained"``) the axes shrink to make room and the figure
    keeps its width; otherwise the legend is anchored just outside the right
    edge. Returns the legend (``None`` when nothing is labelled)."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    seen: dict[str, object] = {}
    for ax in fig.axes:
        for h, l in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(l, h)
    if not seen:
        return None
    kw = dict(fontsize=FONT - 1, title=title, title_fontsize=FONT - 1, frameon=False, **kwargs)
    if isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
        return fig.legend(list(seen.values()), list(seen), loc="outside right upper", **kw)
    return fig.legend(list(seen.values()), list(seen), loc="upper left", bbox_to_anchor=(1.0, 1.0), **kw)


def attention_rows(patterns, names, tokens) -> "pd.DataFrame":
    """Attention patterns ``[n, q, k]`` (one per view, named ``names``) over the string ``tokens`` as
    tidy rows ``view, query, key, weight, query_token``: the causal part ``key <= query`` only (the rest
    of a causal pattern is 0), so that :func:`attention_view` draws them again without a model."""
    import numpy as np
    import pandas as pd

    pats = np.asarray(patterns, dtype=np.float64)
    if pats.ndim != 3 or pats.shape[1] != pats.shape[2] or pats.shape[0] != len(names) or pats.shape[1] != len(tokens):
        raise InputError(f"patterns must be [{len(names)}, {len(tokens)}, {len(tokens)}], got {pats.shape}")
    q, k = np.tril_indices(len(tokens))
    return pd.DataFrame(
        {
            "view": np.repeat(list(names), len(q)),
            "query": np.tile(q, len(names)),
            "key": np.tile(k, len(names)),
            "weight": pats[:, q, k].reshape(-1),
            "query_token": np.tile(np.asarray(tokens, dtype=object)[q], len(names)),
        }
    )


def attention_view(rows: "pd.DataFrame", views=None, labels=None, **kwargs):
    """circuitsvis ``attention_heads`` of the patterns :func:`attention_rows` stored (``views``: which, in
    this order; default every view in the order stored; ``labels``: their names in the view, default the
    views'); ``kwargs`` go to circuitsvis (e.g. ``min_value``)."""
    import circuitsvis as cv
    import numpy as np

    views = list(dict.fromkeys(rows["view"])) if views is None else list(views)
    if not views:
        raise InputError("no attention view to draw")
    n = int(rows["query"].max()) + 1
    diag = rows[rows["query"] == rows["key"]].drop_duplicates("query").sort_values("query")
    tokens = [str(t) for t in diag["query_token"]]
    pats = np.zeros((len(views), n, n))
    for i, v in enumerate(views):
        r = rows[rows["view"] == v]
        if r.empty:
            raise InputError(f"no attention view {v!r}; stored: {sorted(set(rows['view']))}")
        pats[i, r["query"].to_numpy(), r["key"].to_numpy()] = r["weight"].to_numpy()
    return cv.attention.attention_heads(
        attention=pats, tokens=tokens, attention_head_names=list(labels or views), **kwargs
    )
