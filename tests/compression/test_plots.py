"""The compression figures (tlgeo.compression.plots): Figure 6 per layer and its files, and each
compressed model's error against its quality."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from tlgeo.compression.plots import plot_layers, plot_prediction, save_figures


def _layers() -> pd.DataFrame:
    """A summarize_layers-shaped frame: two methods, two modes, three sites, four layers."""
    rows = [
        {
            "method": m,
            "mode": mode,
            "site": s,
            "tokens": "all",
            "layer": l,
            "e_perp_mean": 0.1 * (k + 1) * (l + 1),
            "e_par_mean": 0.05 * (k + 1),
        }
        for k, m in enumerate(("wanda", "awq"))
        for mode in ("local", "e2e")
        for s in ("attn", "mlp", "block")
        for l in range(4)
    ]
    return pd.DataFrame(rows)


def test_plot_layers_and_save_figures(tmp_path):
    fig = plot_layers(_layers(), mode="e2e")
    assert [ax.get_title() for ax in fig.axes] == [f"{s} (e2e, all tokens)" for s in ("attn", "mlp", "block")]
    assert all(ax.get_yscale() == "log" for ax in fig.axes)
    assert [l.get_label() for l in fig.axes[0].lines] == ["wanda perp", "wanda par", "awq perp", "awq par"]
    plt.close(fig)
    written = save_figures(_layers(), ("local", "e2e"), tmp_path)
    assert written == [tmp_path / "figure6_local.png", tmp_path / "figure6_e2e.png"]
    assert all(p.stat().st_size > 0 for p in written)


def test_plot_prediction():
    rng = np.random.default_rng(0)
    methods = ["base"] + [f"wanda_s{s}" for s in (30, 40, 50, 60, 70)] + ["rtn_w3g64", "rtn_w4g64"]
    damage = dict(zip(methods, [0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.3, 0.03]))
    quality = pd.DataFrame(
        {
            "method": methods,
            "ppl": [30 * np.exp(3 * damage[m]) for m in methods],
            "acc": [0.7 * (1 - damage[m]) for m in methods],
        }
    )
    # e_perp follows the damage exactly; e adds noise; e_par runs against it
    rows = [
        {
            "method": m,
            "mode": "local",
            "site": "attn",
            "tokens": "all",
            "ref": "delta",
            "mean_e_perp": damage[m],
            "mean_e": damage[m] + rng.normal(0, 0.15),
            "mean_e_par": 1 - damage[m],
        }
        for m in methods[1:]
    ]
    fig = plot_prediction(pd.DataFrame(rows), quality, site="attn", target="acc_drop")
    assert len(fig.axes) == 3 and "rho 1.00" in fig.axes[1].get_title()  # e_perp: the damage itself
    assert "rho -1.00" in fig.axes[2].get_title()  # e_par: against it
    assert len(fig.axes[0].collections) == 2  # two families: wanda and rtn
    plt.close(fig)
