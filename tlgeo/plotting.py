"""The figure style every analysis shares: page-width sizes, legends outside the data,
integer layer ticks, one colour per site.

The report embeds figures at 110 dpi in a page about 1000 px wide, so a figure
:data:`WIDTH` inches wide (legend included) shows at its natural size, with
10-point text about 15 px high. Nothing here touches the data of a plot.
"""

from __future__ import annotations

__all__ = ["WIDTH", "FONT", "SITE_COLORS", "site_color", "integer_ticks", "legend_outside", "plain_log_ticks",
           "style"]

WIDTH = 9.0  # inches, legend included: ~1000 px at the report's 110 dpi
FONT = 11  # points

# one colour per site in every figure (matplotlib's tab10 order)
SITE_COLORS = {"value_excl_self": "#1f77b4", "value_full": "#ff7f0e", "attn": "#2ca02c", "mlp": "#d62728",
               "block": "#9467bd", "diag": "#8c564b", "resid_post": "#e377c2"}
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
