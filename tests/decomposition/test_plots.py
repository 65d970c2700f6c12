"""The decomposition figures (tlgeo.decomposition.plots): sweeps, head maps, the closed-form diagonal
and the circuitsvis before/after view. The shared style (legends outside, integer ticks, page width)
is checked in tests/test_plotting.py."""

import matplotlib

matplotlib.use("Agg")
import pandas as pd
import pytest

from tlgeo.decomposition.closed_form import closed_form_check
from tlgeo.decomposition.heads import head_alpha_map
from tlgeo.decomposition.plots import attention_before_after, plot_diagonal, plot_head_maps, plot_sweep

from .test_heads import _fake_map  # a sensitivity map of layers 1-2, heads 0-3 and the all-head row


def test_plot_sweep():
    rows = [
        dict(site=s, axis=a, scale=x, delta_ppl=d)
        for s in ("attn", "mlp")
        for a, xs in (("s_par", (0, 1, 2)), ("s_perp", (0, 1)))
        for x, d in zip(xs, ((5.0, 0.0, 2.0) if a == "s_par" else (3000.0, 0.0)))
    ]
    fig = plot_sweep(pd.DataFrame(rows))
    axs = fig.axes
    assert [a.get_xlabel() for a in axs] == ["s_par", "s_perp"]
    assert axs[0].get_yscale() == "linear" and axs[1].get_yscale() == "symlog"
    assert len([l for l in axs[0].lines if l.get_linestyle() == "--"]) >= 1
    assert {l.get_label() for l in axs[0].lines} >= {"attn", "mlp"}
    with pytest.raises(ValueError):
        plot_sweep(pd.DataFrame())


def test_plot_head_maps(llama, tokens):
    amap = head_alpha_map(llama, tokens)
    sens = _fake_map()
    sens.loc[(sens.layer == 1) & (sens["head"] == 0), "q"] = 0.01
    fig = plot_head_maps(amap, sens)
    main = [ax for ax in fig.axes if ax.get_title()]
    assert len(main) == 2
    stars = [t for t in main[1].texts if t.get_text() == "*"]
    assert len(stars) == 1 and stars[0].get_position() == (0, 0)  # layer 1 is the first row
    lim = main[0].images[0].norm
    assert lim.vcenter == 0 and lim.vmin == -lim.vmax


def test_closed_form_figures(llama, tokens):
    res = closed_form_check(llama, tokens, 0.0, variants=("value_excl_self",), layers=[1])
    fig = plot_diagonal(res.diag, "value_excl_self", 1)
    assert len(fig.axes) == 3  # two heatmaps and the colour bar
    img = fig.axes[1].images[0].get_array()
    assert img.shape == (llama.cfg.n_heads, tokens.shape[1])
    one = plot_diagonal(res.diag, "value_excl_self", 1, head=2)
    assert one.axes[0].images[0].get_array().shape == (1, tokens.shape[1])
    with pytest.raises(ValueError, match="no diagonal values"):
        plot_diagonal(res.diag, "value_excl_self", 2)
    html = str(attention_before_after(llama, tokens, 1, "value_excl_self", 0.0, heads=[0, 3]))
    assert "h0 before" in html and "h3 after" in html


def test_every_sweep_line_passes_through_the_unedited_point_even_when_the_grid_lacks_scale_one():
    rows = [dict(site="attn", axis="s_par", scale=x, delta_ppl=d) for x, d in ((0.0, 5.0), (0.5, 1.0), (2.0, 3.0))]
    ax = plot_sweep(pd.DataFrame(rows)).axes[0]
    (line,) = [l for l in ax.lines if l.get_label() == "attn"]
    assert list(line.get_xdata()) == [0.0, 0.5, 1.0, 2.0] and list(line.get_ydata()) == [5.0, 1.0, 0.0, 3.0]
    hollow = [l for l in ax.lines if l.get_markerfacecolor() == "white"]
    assert len(hollow) == 1 and list(hollow[0].get_xdata()) == [1.0]  # drawn apart: not run
