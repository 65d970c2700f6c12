"""Per-layer sparsity at a fixed global sparsity (pure; no models).

:func:`allocate_sparsity` is OWL's rule (Yin et al., 2023): per-layer scores are
min-max scaled to ``[0, 2 * spread]`` and a layer's sparsity is the target minus its
centred score, so the mean sparsity stays at the target, the spread across layers
is at most ``2 * spread``, and a higher score keeps more weights. What differs is
the score:

* :func:`outlier_ratio` -- OWL's layerwise outlier distribution: the share of Wanda
  scores ``|W_ij| ||X_j||`` of a block above ``m`` times their mean (``m = 5``);
* :func:`perp_sensitivity` -- the direction-aware score: a block's perpendicular
  error ``||e_perp|| / ||Delta_base||`` measured by the local counterfactual
  (``tlgeo compression``) of the uniformly pruned model.

The mean is over layers, as in OWL (every Llama / Gemma block has the same number
of prunable weights, so it is also the global sparsity).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..errors import InputError

__all__ = ["allocate_sparsity", "outlier_ratio", "perp_sensitivity"]


def allocate_sparsity(scores: Sequence[float], target: float, spread: float = 0.08) -> np.ndarray:
    """Per-layer sparsities with mean ``target``: ``target - (r - mean r)``, ``r`` the scores
    min-max scaled to ``[0, 2 * spread]`` (equal scores: uniform ``target``)."""
    s = np.asarray(scores, dtype=float)
    if s.ndim != 1 or len(s) == 0 or not np.isfinite(s).all():
        raise InputError(f"scores must be a non-empty 1-d finite sequence, got {scores!r}")
    if not 0.0 < target < 1.0 or spread < 0:
        raise InputError(f"need 0 < target < 1 and spread >= 0, got target={target}, spread={spread}")
    if target - spread <= 0 or target + spread >= 1:
        raise InputError(f"target {target} +- spread {spread} leaves (0, 1)")
    span = np.ptp(s)
    r = (s - s.min()) / span * 2 * spread if span > 0 else np.zeros_like(s)
    return target - (r - r.mean())


def outlier_ratio(scores: Sequence[Tensor], m: float = 5.0) -> float:
    """OWL's outlier ratio of one block: the share of all its Wanda scores (the tensors of
    every prunable layer, pooled) above ``m`` times their mean."""
    flat = torch.cat([s.reshape(-1).float() for s in scores])
    if flat.numel() == 0:
        raise InputError("no scores")
    return float((flat > m * flat.mean()).float().mean())


def perp_sensitivity(
    layers: pd.DataFrame,
    method: str,
    *,
    site: str = "block",
    tokens: str = "all",
    mode: str = "local",
    column: str = "e_perp",
) -> np.ndarray:
    """Per-layer ``column`` (mean over prompts) of ``method`` in a ``diag_layers.csv``
    frame (:func:`tlgeo.compression.decompose.summarize_layers`), ordered by layer."""
    col = f"{column}_mean"
    g = layers[
        (layers["method"] == method)
        & (layers["site"] == site)
        & (layers["tokens"] == tokens)
        & (layers["mode"] == mode)
    ]
    if g.empty:
        have = sorted(layers["method"].unique()) if "method" in layers else []
        raise InputError(f"no {mode}/{site}/{tokens} rows for method {method!r} (have {have})")
    if col not in g:
        raise InputError(f"no column {col!r} in the diagnosis table")
    g = g.sort_values("layer")
    if not np.array_equal(g["layer"].to_numpy(), np.arange(len(g))):
        raise InputError(f"layers of {method!r} are not 0..{len(g) - 1}: {g['layer'].tolist()}")
    return g[col].to_numpy(float)
