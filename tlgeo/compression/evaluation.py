"""Quality of compressed models and whether their error geometry predicts it.

* :func:`baseline_of` -- the llmcompressor baseline a direction-aware method is
  compared with (``awq_perp_l0.5`` -> ``awq``, ``sgpt_perp_2_4`` -> ``sgpt_2_4``,
  ``owl_s70`` / ``perpalloc_s70`` -> ``wanda_s70``; an isotropic method -> the dense ``base``);
* :func:`quality_table` -- per method: perplexity, pooled zero-shot accuracy, the
  paired change against its baseline on the same items
  (:func:`tlgeo.evals.zeroshot.paired_accuracy_change`) and the compression time;
* :func:`prediction_test` -- across compressed models, Spearman's rho of the mean
  error, its perpendicular and its parallel part (per site / mode / tokens /
  reference, from the Table 12 frame) with log PPL and with the accuracy drop,
  bootstrap CIs, and the paired comparison of the perpendicular part against the
  others (:func:`tlgeo.stats.compare_correlations`).
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from .methods import parse_method

__all__ = ["baseline_of", "quality_table", "prediction_test", "PREDICTORS"]

PREDICTORS = {"e": "mean_e", "e_perp": "mean_e_perp", "e_par": "mean_e_par"}


def baseline_of(method: str, available: set[str] | None = None) -> str:
    """The isotropic llmcompressor method of the same strength, or ``"base"`` (dense) for
    an isotropic method or when that baseline is not in ``available``."""
    if method == "base":
        return "base"
    spec = parse_method(method)
    if not spec.perp and spec.family not in ("owl", "perpalloc"):
        return "base"
    family = "wanda" if spec.family in ("owl", "perpalloc") else spec.family
    rest = spec.canonical.split("_")[1:]
    rest = [p for p in rest if p != "perp" and not p.startswith("l")]
    name = "_".join([family, *rest])
    if available is not None:
        names = {parse_method(m).canonical: m for m in available if m != "base"}
        return names.get(name, "base")
    return name


def quality_table(
    ppl: pd.DataFrame,
    items: Mapping[str, pd.DataFrame],
    seconds: Mapping[str, float] | None = None,
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per method: ``ppl``, pooled ``acc`` (and per task ``acc_<task>``), ``baseline``,
    the paired ``delta_acc`` (points) against it with ``ci_low``, ``ci_high``, ``p``, and
    ``seconds`` of compression. ``ppl``: columns ``method, ppl``; ``items``: per method the
    item frame of :func:`tlgeo.evals.zeroshot.evaluate_zeroshot` (``return_items``)."""
    from ..evals.zeroshot import paired_accuracy_change

    ppl = ppl.set_index("method")["ppl"]
    methods = list(dict.fromkeys([*ppl.index, *items]))
    rows = []
    for m in methods:
        row = {"method": m, "ppl": float(ppl.get(m, np.nan))}
        it = items.get(m)
        if it is not None:
            row["acc"] = float(it["correct"].mean())
            row["n_items"] = len(it)
            for task, g in it.groupby("task", sort=False):
                row[f"acc_{task}"] = float(g["correct"].mean())
        base = baseline_of(m, set(methods))
        row["baseline"] = base
        if it is not None and m != "base" and base in items:
            d = paired_accuracy_change(it, items[base], seed=seed)
            d = d[d["metric"] == "acc"].iloc[0]
            row.update(
                delta_acc=float(d["delta"]), ci_low=float(d["ci_low"]), ci_high=float(d["ci_high"]), p=float(d["p"])
            )
        if seconds is not None:
            row["seconds"] = seconds.get(m, np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def prediction_test(
    table12: pd.DataFrame,
    quality: pd.DataFrame,
    *,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Does ``||e_perp||`` predict quality better than ``||e||`` or ``||e_par||``?

    ``table12``: :func:`tlgeo.compression.decompose.across_layer_stats` rows (``mean_e``,
    ``mean_e_perp``, ``mean_e_par`` per method, mode, site, tokens, ref). ``quality``:
    :func:`quality_table` (``method, ppl, acc``; the dense ``base`` row gives the
    accuracy drop ``acc(base) - acc`` in points). Targets: ``log_ppl`` and ``acc_drop``
    (both grow with damage, so a good predictor has a large positive rho).

    Returns ``(correlations, comparisons)``: rho with its bootstrap CI per predictor,
    and ``e_perp`` against ``e`` and against ``e_par``: the difference of rho with a
    paired bootstrap CI and p, and Steiger's Z and p.
    """
    from ..stats import compare_correlations, spearman_ci

    q = quality.set_index("method")
    targets = {"log_ppl": np.log(q["ppl"].astype(float))}
    if "acc" in q and "base" in q.index and np.isfinite(q.loc["base", "acc"]):
        targets["acc_drop"] = 100 * (q.loc["base", "acc"] - q["acc"].astype(float))
    keys = ["mode", "site", "tokens", "ref"]
    corr, comp = [], []
    for key, g in table12[table12["method"].isin(q.index)].groupby(keys, sort=True):
        g = g.set_index("method")
        for tname, y in targets.items():
            y = y.reindex(g.index)
            ok = np.isfinite(y.to_numpy(float))
            if ok.sum() < 4:
                continue
            gg, yy = g[ok], y[ok].to_numpy(float)
            for pname, col in PREDICTORS.items():
                c = spearman_ci(gg[col].to_numpy(float), yy, n_boot=n_boot, seed=seed)
                corr.append(
                    {
                        **dict(zip(keys, key)),
                        "target": tname,
                        "predictor": pname,
                        "rho": c.rho,
                        "ci_low": c.ci_low,
                        "ci_high": c.ci_high,
                        "n_models": c.n,
                    }
                )
            for other in ("e", "e_par"):
                d = compare_correlations(
                    gg["mean_e_perp"].to_numpy(float),
                    gg[PREDICTORS[other]].to_numpy(float),
                    yy,
                    n_boot=n_boot,
                    seed=seed,
                )
                comp.append(
                    {
                        **dict(zip(keys, key)),
                        "target": tname,
                        "a": "e_perp",
                        "b": other,
                        "rho_a": d.rho_a,
                        "rho_b": d.rho_b,
                        "diff": d.diff,
                        "ci_low": d.ci_low,
                        "ci_high": d.ci_high,
                        "p_boot": d.p_boot,
                        "z_steiger": d.z,
                        "p_steiger": d.p_steiger,
                        "n_models": d.n,
                    }
                )
    return pd.DataFrame(corr), pd.DataFrame(comp)
