"""The report figures: legends outside the data, integer layer / head / position ticks, page width."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from tlgeo.decomposition.closed_form import closed_form_check
from tlgeo.decomposition.heads import head_alpha_map
from tlgeo.decomposition.plots import plot_diagonal, plot_head_maps, plot_profile, plot_sweep
from tlgeo.plotting import WIDTH, integer_ticks, site_color


def _ticks_are_integers(axis) -> bool:
    locs = [v for v in axis.get_majorticklocs() if np.isfinite(v)]
    return bool(locs) and all(float(v).is_integer() for v in locs)


def _legend_clear_of_axes(fig) -> None:
    fig.canvas.draw()
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends, "no legend"
    renderer = fig.canvas.get_renderer()
    for leg in legends:
        box = leg.get_window_extent(renderer)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), "legend over the data"


def _profile_summary(n_layers: int = 7) -> pd.DataFrame:
    rows = [
        dict(site=s, layer=l, parallel_ratio_median=0.1 + 0.05 * l + 0.1 * i)
        for i, s in enumerate(("attn", "mlp", "value_excl_self"))
        for l in range(n_layers)
    ]
    return pd.DataFrame(rows)


def test_profile_figure():
    fig = plot_profile(_profile_summary())
    ax = fig.axes[0]
    assert _ticks_are_integers(ax.xaxis)  # layers: never 2.5
    _legend_clear_of_axes(fig)
    assert fig.get_figwidth() <= WIDTH + 1e-9  # page width, legend included
    lines = {l.get_label(): l.get_color() for l in ax.lines}
    assert lines["attn"] == site_color("attn") and lines["mlp"] == site_color("mlp")  # one colour per site
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and all("^" not in t for t in labels)  # plain numbers on the log axis, not 10^-1
    plt.close(fig)


def test_sweep_figure_has_one_legend_outside():
    rows = [
        dict(site=s, axis=a, scale=x, delta_ppl=d)
        for s in ("attn", "mlp")
        for a, xs in (("s_par", (0, 1, 2)), ("s_perp", (0, 1)))
        for x, d in zip(xs, ((5.0, 0.0, 2.0) if a == "s_par" else (3000.0, 0.0)))
    ]
    fig = plot_sweep(pd.DataFrame(rows))
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["attn", "mlp"]
    _legend_clear_of_axes(fig)
    assert fig.get_figwidth() <= WIDTH + 1e-9
    plt.close(fig)


def test_head_and_diagonal_figures_have_integer_ticks(llama, tokens):
    amap = head_alpha_map(llama, tokens)
    fig = plot_head_maps(amap)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [str(l) for l in sorted(amap["layer"].unique())]
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(h) for h in range(llama.cfg.n_heads)]
    assert fig.get_figwidth() <= WIDTH + 1e-9
    plt.close(fig)
    res = closed_form_check(llama, tokens, 0.0, variants=("value_excl_self",), layers=[1])
    fig = plot_diagonal(res.diag, "value_excl_self", 1, head=0)
    assert _ticks_are_integers(fig.axes[1].xaxis)  # positions
    assert fig.get_figwidth() <= WIDTH + 1e-9
    plt.close(fig)


def test_integer_ticks_helper():
    fig, ax = plt.subplots()
    ax.plot([0, 3], [0, 1])
    integer_ticks(ax.xaxis)
    fig.canvas.draw()
    assert _ticks_are_integers(ax.xaxis)
    plt.close(fig)


@pytest.mark.parametrize("site", ["value_excl_self", "not_a_site"])
def test_site_colors_are_stable(site):
    assert site_color(site) == site_color(site) and site_color(site).startswith("#")


def test_known_sites_get_distinct_colours():
    from tlgeo.hooks.sites import SITES

    colours = [site_color(s) for s in SITES]
    assert len(set(colours)) == len(colours)  # no two sites share a line colour


def test_pdsf_and_tokenwise_figures_keep_legends_and_ticks_off_each_other():
    """The atlas screenshots showed legends over the PDSF bars and lines and overlapping log tick labels on
    the tokenwise scatter (issue: the report at a glance)."""
    from tlgeo.pdsf.plots import plot_energy_pr, plot_single_pass
    from tlgeo.tokenwise.plots import plot_error_vs_kl

    rng = np.random.default_rng(0)
    n = 31
    share = rng.dirichlet(np.ones(4), n)
    layers = pd.DataFrame(
        {
            "layer": range(n),
            **{f"energy_{p}": share[:, i] for i, p in enumerate("PDSF")},
            "pr_D": rng.uniform(1, 4, n),
            "pr_S": rng.uniform(1, 12, n),
            "interface_dim": 10.0,
            "k_D": 4,
            "k_S": 12,
        }
    )
    conds = ["D_rotate", "S_rotate", "random_rotate", "F_attenuate", "F_mix", "F_transplant", "F_top_rotate"]
    summary = pd.DataFrame({"condition": conds, "kl_mean": rng.uniform(1e-3, 5, 7), "kl_sem": 0.01})
    angles = pd.DataFrame(
        [
            dict(condition=c, state=s, angle_mean=90 * np.exp(-s / 5) + 40 * (i > 3))
            for i, c in enumerate(conds)
            for s in range(4, 31)
        ]
    )
    tokens = pd.DataFrame(
        {
            "layer": 15,
            "class": rng.choice(["linear", "global", "mlp"], 300),
            "rel_error": rng.uniform(0.18, 1.1, 300),
            "kl": 10 ** rng.uniform(-4, 0, 300),
        }
    )
    for fig in (plot_energy_pr(layers), plot_single_pass(summary, angles), plot_error_vs_kl(tokens)):
        _legend_clear_of_axes(fig)
        assert fig.get_figwidth() <= WIDTH + 1e-9
    fig = plot_error_vs_kl(tokens)
    fig.canvas.draw()
    boxes = [t.get_window_extent() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert boxes and not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    lines = plot_single_pass(summary, angles).axes[1].get_lines()
    assert len({(l.get_color(), l.get_marker()) for l in lines}) == len(conds)  # each condition told apart
    plt.close("all")


def test_attention_rows_keep_a_causal_pattern_and_draw_it_again():
    import numpy as np

    from tlgeo.plotting import attention_rows, attention_view

    rng = np.random.default_rng(0)
    pats = np.tril(rng.random((2, 4, 4)))
    rows = attention_rows(pats, ["a", "b"], ["x", " y", "\n", "z"])
    assert len(rows) == 2 * 10 and (rows["key"] <= rows["query"]).all()
    back = np.zeros_like(pats)
    for i, v in enumerate(["a", "b"]):
        r = rows[rows["view"] == v]
        back[i, r["query"], r["key"]] = r["weight"]
    np.testing.assert_array_equal(back, pats)  # nothing above the diagonal is lost: it is 0
    html = str(attention_view(rows, ["b"], ["b (label)"]))
    assert "b (label)" in html and '" y"' in html
    with pytest.raises(ValueError, match="no attention view 'c'"):
        attention_view(rows, ["c"])
    with pytest.raises(ValueError, match="patterns must be"):
        attention_rows(pats, ["a"], ["x", "y", "z", "w"])
