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
from .fits import CLASSES, POOL_CLASSES, geometry_row, layer_outputs, local_params, neighbours, tokenwise_outputs
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
                       progress: bool = False, threads: int = 1,
                       patch_layers: Iterable[int] | None = None) -> TokenwiseResult:
    """Geometry, patching KL and Spearman(error, KL) for ``layers`` (default all) and ``classes``;
    ``patch_layers``: the layers patched for the KL (default: all of ``layers``); ``threads``:
    chunks of local fits side by side."""
    bad = [c for c in classes if c not in CLASSES]
    if bad or not classes:
        raise ValueError(f"unknown map class(es) {bad or list(classes)}; choose from {CLASSES}")
    layers = list(range(pool.n_layers)) if layers is None else list(layers)
    out_of_range = [l for l in layers if not 0 <= l < pool.n_layers]
    if out_of_range:
        raise ValueError(f"layers {out_of_range} out of range: the pool has layer maps 0..{pool.n_layers - 1}")
    patch_layers = layers if patch_layers is None else sorted(set(patch_layers))
    if not patch_layers or not set(patch_layers) <= set(layers):
        raise ValueError(f"patch_layers {patch_layers} must be a non-empty subset of the fitted layers {layers}")
    if n_patch < 3 or n_patch > pool.n_tokens:
        raise ValueError(f"n_patch must be between 3 and the pool's {pool.n_tokens} tokens, got {n_patch}")
    subset = np.sort(np.random.default_rng(seed).choice(pool.n_tokens, n_patch, replace=False))
    settings = {"k": k, "exclude_sequence": exclude_sequence, "rank": rank, "ridge": ridge, "energy": energy,
                "n_patch": n_patch, "seed": seed, "n_tokens": pool.n_tokens}
    log = ResultLog(log_path, key=("stage", "layer", "class", *settings, "patch_layers")) if log_path else None
    kw = dict(k=k, exclude_sequence=exclude_sequence, rank=rank, ridge=ridge)

    geo_rows = []
    fitted: dict[tuple[int, str], torch.Tensor] = {}  # subset outputs fitted in this call, reused for patching
    it = layers
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(layers, desc="tokenwise fits", leave=False)
    sub = torch.as_tensor(subset)
    for l in it:
        keys = {c: {"stage": "geometry", "layer": l, "class": c, **settings, "patch_layers": None} for c in classes}
        rows = {c: log.get(**keys[c]) if log else None for c in classes}
        todo = [c for c in classes if rows[c] is None]
        if todo:
            h_in, h_out = pool.pair(l)
            outs = layer_outputs(pool, l, todo, threads=threads, **kw)
            for c, t in outs.items():
                fitted[(l, c)] = t[sub]
                summary, g = geometry_row(h_in, h_out, t, energy)
                rows[c] = {**keys[c], **summary, "subset_error": g.rel_error[sub].tolist(),
                           "subset_angle": g.residual_angle[sub].tolist()}
                if log:
                    log.add(rows[c])
        geo_rows += [rows[c] for c in classes]

    token_rows = []
    for c in classes:
        key = {"stage": "patching", "layer": -1, "class": c, **settings, "patch_layers": patch_layers}
        row = log.get(**key) if log else None
        if row is None:
            reps = {l: fitted.pop((l, c), None) for l in patch_layers}
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
    hidden = ("stage", "patch_layers")
    geometry = pd.DataFrame([{k2: v for k2, v in r.items() if not k2.startswith("subset_") and k2 not in hidden}
                             for r in geo_rows])
    return TokenwiseResult(geometry, tokens, pd.DataFrame(corr))
