"""The compression-diagnosis tables from per-prompt rows, and :func:`run_diagnosis` (tables and figures).

``tlgeo compress-diag`` runs :func:`tlgeo.compression.analysis.run` (the analysis contract);
:func:`run_diagnosis` is the same diagnosis for models given as objects or directories (the
notebook's entry point). Both derive the tables with :func:`summary_tables` and draw the
figures with :func:`tlgeo.compression.plots.save_figures`. :func:`run_diagnosis`'s outputs in ``out``:

* ``diag_prompts.csv.gz`` -- per (method, mode, site, layer, tokens, prompt) ratios, appended per method
  (a rerun skips methods already there);
* ``diag_layers.csv`` -- mean and SD over prompts per layer (Figure 6's data);
* ``table12.csv`` -- across-layer statistics per method, mode, site, tokens, reference;
* ``ppl_prediction.csv`` -- across methods, correlation of log PPL with the mean error,
  its perpendicular and its parallel part (when ``ppl.csv`` from ``tlgeo compress`` is given);
* ``figure6_<mode>.png`` -- per-layer curves per method;
* ``timing.csv`` -- wall seconds of the diagnosis per method.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from .counterfactual import diagnose, prompt_windows
from .decompose import across_layer_stats, summarize_layers
from .plots import save_figures

__all__ = ["run_diagnosis", "ppl_prediction", "summary_tables"]


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


def run_diagnosis(
    base,
    compressed: Mapping[str, object],
    text: str,
    out: str | os.PathLike,
    *,
    n_prompts: int = 12,
    seq_len: int = 128,
    modes: Iterable[str] = ("local", "e2e"),
    ppl: pd.DataFrame | None = None,
    figure: bool = True,
    progress: bool = True,
) -> dict[str, pd.DataFrame]:
    """Diagnose every compressed model against ``base`` on ``n_prompts`` windows of ``text``
    and write the tables and figures to ``out``; resumes per method. Returns the frames."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    modes = tuple(modes)
    tokens = prompt_windows(base, text, n_prompts, seq_len)
    prompts_path, timing_path = out / "diag_prompts.csv.gz", out / "timing.csv"
    old = pd.read_csv(prompts_path) if prompts_path.exists() else pd.DataFrame()
    timing = pd.read_csv(timing_path) if timing_path.exists() else pd.DataFrame()
    done = set()
    if len(old):
        cfg_ok = old["n_prompts_cfg"].eq(n_prompts).all() and old["seq_len_cfg"].eq(seq_len).all()
        if not cfg_ok:
            raise ValueError(f"{prompts_path} was made with other prompts; use another --out or delete it")
        done = {m for m, g in old.groupby("method") if set(g["mode"]) >= set(modes)}

    def save(method, df, seconds):
        nonlocal old, timing
        df = df.assign(n_prompts_cfg=n_prompts, seq_len_cfg=seq_len)
        old = pd.concat([old[old["method"] != method] if len(old) else old, df], ignore_index=True)
        old.to_csv(prompts_path, index=False)
        timing = pd.concat([timing[timing["method"] != method] if len(timing) else timing,
                            pd.DataFrame([{"method": method, "seconds": seconds, "modes": ",".join(modes),
                                           "n_prompts": n_prompts, "seq_len": seq_len}])], ignore_index=True)
        timing.to_csv(timing_path, index=False)
        if progress:
            print(f"[{method}] diagnosis {seconds:.1f} s", flush=True)

    t0 = time.perf_counter()
    diagnose(base, compressed, tokens, modes=modes, done=done, on_method=save)
    if progress:
        print(f"diagnosis of {len(compressed) - len(done)} method(s): {time.perf_counter() - t0:.1f} s", flush=True)
    prompts = old[old["method"].isin(list(compressed))].drop(columns=["n_prompts_cfg", "seq_len_cfg"])
    layers, table = summary_tables(prompts, compressed)
    layers.to_csv(out / "diag_layers.csv", index=False)
    table.to_csv(out / "table12.csv", index=False)
    frames = {"prompts": prompts, "layers": layers, "table12": table}
    if ppl is not None and len(ppl):
        pred = ppl_prediction(table, ppl)
        pred.to_csv(out / "ppl_prediction.csv", index=False)
        frames["ppl_prediction"] = pred
    if figure:
        save_figures(layers, modes, out)
    return frames
