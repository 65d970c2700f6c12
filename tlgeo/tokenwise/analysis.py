"""The tokenwise analysis of one model: geometry per (layer, class), then patching KL and its
rank correlation with the approximation error.

:func:`tokenwise_analysis` takes a collected :class:`~tlgeo.tokenwise.pool.StatePool`:

1. per layer and class, the fit of every pool token and the medians of its
   geometry (:func:`tlgeo.tokenwise.fits.layer_geometry`'s columns), plus the
   relative error of a fixed random subset of ``n_patch`` tokens;
2. per class, the KL of patching each subset token's ``h_{l+1}`` to its
   approximation at every layer (:func:`tlgeo.tokenwise.patching.patch_kl`);
3. per (layer, class), Spearman(error, KL) with a bootstrap CI over windows.

Each (layer, class) and each class's patching is one line of the resume log.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from ..geometry.local_maps import fit_local
from ..results import ResultLog
from ..stats.correlation import spearman_ci
from .fits import CLASSES, POOL_CLASSES, geometry_row, local_params, neighbours, tokenwise_outputs
from .patching import patch_kl
from .pool import StatePool

__all__ = ["PAPER", "TokenwiseResult", "tokenwise_analysis"]

PAPER = {"cos_update": "≈ 1", "share_angle_above_60": "many tokens", "spearman": "0.7–0.95",
         "depth": "middle layers: largest residuals, weakest alignment"}


class TokenwiseResult:
    """``geometry`` (one row per layer and class), ``tokens`` (the patched subset: error and KL
    per token, layer and class) and ``correlation`` (Spearman per layer and class)."""

    def __init__(self, geometry: pd.DataFrame, tokens: pd.DataFrame, correlation: pd.DataFrame):
        self.geometry, self.tokens, self.correlation = geometry, tokens, correlation


def _subset_outputs(pool: StatePool, layer: int, kind: str, subset: np.ndarray, **kw) -> torch.Tensor:
    """``T(h_layer)`` of the subset tokens only (their neighbours come from the cache): for a
    patching stage resumed after the geometry stage was read from the log."""
    h_in, h_out = pool.pair(layer)
    if kind in POOL_CLASSES:
        return tokenwise_outputs(pool, layer, kind, ridge=kw["ridge"])[torch.as_tensor(subset)]
    nb = neighbours(pool, layer, kw["k"], exclude_sequence=kw["exclude_sequence"])[subset]
    return fit_local(kind, h_in[nb], h_out[nb], h_in[torch.as_tensor(subset), None],
                     **local_params(kind, kw["rank"], kw["ridge"]))[:, 0].float()


def tokenwise_analysis(model, pool: StatePool, *, layers: Iterable[int] | None = None,
                       classes: Sequence[str] = CLASSES, k: int = 32, exclude_sequence: bool = True, rank: int = 8,
                       ridge: float = 1e-3, energy: float = 0.9, n_patch: int = 256, seed: int = 0,
                       batch_size: int = 16, n_boot: int = 1000, log_path: str | os.PathLike | None = None,
                       progress: bool = False) -> TokenwiseResult:
    """Geometry, patching KL and Spearman(error, KL) for ``layers`` (default all) and ``classes``."""
    bad = [c for c in classes if c not in CLASSES]
    if bad or not classes:
        raise ValueError(f"unknown map class(es) {bad or list(classes)}; choose from {CLASSES}")
    layers = list(range(pool.n_layers)) if layers is None else list(layers)
    out_of_range = [l for l in layers if not 0 <= l < pool.n_layers]
    if out_of_range:
        raise ValueError(f"layers {out_of_range} out of range: the pool has layer maps 0..{pool.n_layers - 1}")
    if n_patch < 3 or n_patch > pool.n_tokens:
        raise ValueError(f"n_patch must be between 3 and the pool's {pool.n_tokens} tokens, got {n_patch}")
    subset = np.sort(np.random.default_rng(seed).choice(pool.n_tokens, n_patch, replace=False))
    settings = {"k": k, "exclude_sequence": exclude_sequence, "rank": rank, "ridge": ridge, "energy": energy,
                "n_patch": n_patch, "seed": seed, "n_tokens": pool.n_tokens}
    log = ResultLog(log_path, key=("stage", "layer", "class", *settings)) if log_path else None
    kw = dict(k=k, exclude_sequence=exclude_sequence, rank=rank, ridge=ridge)

    geo_rows = []
    fitted: dict[tuple[int, str], torch.Tensor] = {}  # subset outputs fitted in this call, reused for patching
    todo = [(l, c) for l in layers for c in classes]
    it = todo
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(todo, desc="tokenwise fits", leave=False)
    for l, c in it:
        key = {"stage": "geometry", "layer": l, "class": c, **settings}
        row = log.get(**key) if log else None
        if row is None:
            h_in, h_out = pool.pair(l)
            t = tokenwise_outputs(pool, l, c, **kw)
            fitted[(l, c)] = t[torch.as_tensor(subset)]
            summary, g = geometry_row(h_in, h_out, t, energy)
            row = {**key, **summary, "subset_error": g.rel_error[torch.as_tensor(subset)].tolist(),
                   "subset_angle": g.residual_angle[torch.as_tensor(subset)].tolist()}
            if log:
                log.add(row)
        geo_rows.append(row)

    token_rows = []
    for c in classes:
        key = {"stage": "patching", "layer": -1, "class": c, **settings}
        row = log.get(**key) if log else None
        if row is None:
            reps = {l: fitted.pop((l, c), None) for l in layers}
            reps = {l: r if r is not None else _subset_outputs(pool, l, c, subset, **kw) for l, r in reps.items()}
            df = patch_kl(model, pool, subset, reps, batch_size=batch_size, progress=progress)
            row = {**key, "kl": df["kl"].tolist(), "kl_following": df["kl_following"].tolist(),
                   "layers": df["layer"].tolist(), "index": df["index"].tolist()}
            if log:
                log.add(row)
        token_rows.append(pd.DataFrame({"class": c, "layer": row["layers"], "index": row["index"],
                                        "kl": row["kl"], "kl_following": row["kl_following"]}))
    tokens = pd.concat(token_rows, ignore_index=True)
    errors = pd.concat([pd.DataFrame({"class": r["class"], "layer": r["layer"], "index": subset,
                                      "rel_error": r["subset_error"], "residual_angle": r["subset_angle"]})
                        for r in geo_rows], ignore_index=True)
    tokens = tokens.merge(errors, on=["class", "layer", "index"])
    tokens["window"] = pool.window[tokens["index"].to_numpy()]

    corr = []
    for (l, c), g in tokens.groupby(["layer", "class"]):
        for target in ("kl", "kl_following"):
            s = spearman_ci(g["rel_error"], g[target], groups=g["window"], n_boot=n_boot, seed=seed)
            corr.append({"layer": l, "class": c, "target": target, "spearman": s.rho, "ci_low": s.ci_low,
                         "ci_high": s.ci_high, "n": s.n})
    geometry = pd.DataFrame([{k2: v for k2, v in r.items() if not k2.startswith("subset_") and k2 != "stage"}
                             for r in geo_rows])
    return TokenwiseResult(geometry, tokens, pd.DataFrame(corr))
