"""The compression diagnosis's summary tables, pure pandas: the per-layer and across-layer tables of
per-prompt rows (:func:`summary_tables`, what :func:`tlgeo.compression.analysis.run` returns beside the rows)
and, given each method's perplexity, whether the mean error, its perpendicular or its parallel part
predicts it (:func:`ppl_prediction`; ``ppl_prediction.csv`` of ``tlgeo compression``).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from .decompose import across_layer_stats, summarize_layers

__all__ = ["ppl_prediction", "summary_tables"]


def ppl_prediction(table: pd.DataFrame, ppl: pd.DataFrame) -> pd.DataFrame:
    """Across methods, Pearson and Spearman correlation of ``log(ppl)`` with ``mean_e``
    (total L2), ``mean_e_perp`` and ``mean_e_par`` of :func:`across_layer_stats`, per
    (mode, site, tokens, ref). ``ppl``: columns ``method, ppl``."""
    from scipy import stats

    t = table.merge(ppl[["method", "ppl"]], on="method")
    rows = []
    for key, g in t.groupby(["mode", "site", "tokens", "ref"], sort=True):
        y = np.log(g["ppl"].to_numpy(float))
        row = dict(zip(["mode", "site", "tokens", "ref"], key), n_methods=len(g))
        for col in ("mean_e", "mean_e_perp", "mean_e_par"):
            x = g[col].to_numpy(float)
            ok = len(g) >= 3 and np.std(x) > 0
            row[f"pearson_logppl_{col[5:]}"] = float(stats.pearsonr(x, y)[0]) if ok else float("nan")
            row[f"spearman_ppl_{col[5:]}"] = float(stats.spearmanr(x, y)[0]) if ok else float("nan")
        rows.append(row)
    return pd.DataFrame(rows)


def summary_tables(prompts: pd.DataFrame, methods: Iterable[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(layers, table12)`` of per-prompt rows: :func:`summarize_layers` (Figure 6's data) and
    :func:`across_layer_stats` relative to ``Delta_base`` and to ``z`` (Table 12), methods in the
    order of ``methods``."""
    order = {m: i for i, m in enumerate(methods)}
    by_method = lambda s: s.map(order) if s.name == "method" else s  # noqa: E731
    layers = summarize_layers(prompts)
    layers = layers.sort_values(["method", "mode", "site", "tokens", "layer"], key=by_method)
    table = pd.concat([across_layer_stats(layers, "delta"), across_layer_stats(layers, "z")], ignore_index=True)
    table = table.sort_values(["ref", "mode", "site", "tokens", "method"], key=by_method)
    return layers, table
