"""Local tokenwise fits of every layer map over a state pool, and the geometry of what they leave.

For layer map ``l`` of a :class:`~tlgeo.tokenwise.pool.StatePool`, every token's
``k`` nearest neighbours in ``h_l`` (leave-one-out; with ``exclude_sequence``
also no token of its own window) are found once and cached in the pool's
directory; each local class (:data:`tlgeo.geometry.local_maps.LOCAL_MAPS`) is
fitted on each token's neighbourhood and applied to the token
(:func:`tlgeo.geometry.local_maps.tokenwise_fit`), and the ``global`` baseline is
one ridge linear map for the whole pool. :func:`layer_geometry` returns one row
per (layer, class) from :func:`tlgeo.geometry.tokenwise.update_geometry`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from ..geometry.local_maps import LOCAL_MAPS, global_linear, tokenwise_fit
from ..geometry.neighbours import knn
from ..geometry.tokenwise import update_geometry
from .pool import StatePool

__all__ = ["CLASSES", "neighbours", "tokenwise_outputs", "layer_geometry"]

CLASSES = (*LOCAL_MAPS, "global")
ANGLE_THRESHOLD = 60.0  # degrees: the paper's "large angular deviation"


def neighbours(pool: StatePool, layer: int, k: int, *, exclude_sequence: bool = True,
               chunk: int = 1024) -> torch.Tensor:
    """``[n_tokens, k]`` neighbour indices of every token in ``h_layer`` (cached in the pool's directory)."""
    path = Path(pool.directory) / f"neighbours_l{layer}_k{k}_{'xseq' if exclude_sequence else 'loo'}.npy"
    if path.exists():
        return torch.from_numpy(np.load(path))
    h, _ = pool.pair(layer)
    groups = torch.from_numpy(pool.window)
    _, idx = knn(h, k, groups=groups, exclude_group=exclude_sequence, chunk=chunk)
    np.save(path, idx.numpy())
    return idx


def tokenwise_outputs(pool: StatePool, layer: int, kind: str, *, k: int = 32, exclude_sequence: bool = True,
                      rank: int = 8, ridge: float = 1e-3, chunk: int = 256) -> torch.Tensor:
    """``T(h_layer)`` of every token under class ``kind`` (float32 ``[n_tokens, d_model]``)."""
    if kind not in CLASSES:
        raise ValueError(f"unknown map class {kind!r}; choose from {CLASSES}")
    h_in, h_out = pool.pair(layer)
    if kind == "global":
        return h_in @ global_linear(h_in, h_out, ridge=ridge).float()
    nb = neighbours(pool, layer, k, exclude_sequence=exclude_sequence)
    params = {"rank": rank, "ridge": ridge} if kind == "lowrank" else {"ridge": ridge} if kind == "linear" else {}
    return tokenwise_fit(kind, h_in, h_out, nb, chunk=chunk, **params).float()


def layer_geometry(pool: StatePool, layers: Iterable[int] | None = None, classes: Sequence[str] = CLASSES, *,
                   k: int = 32, exclude_sequence: bool = True, rank: int = 8, ridge: float = 1e-3,
                   energy: float = 0.9) -> pd.DataFrame:
    """One row per (layer, class): medians over tokens of ``cos_update``, ``rel_error``,
    ``residual_angle`` and ``residual_energy``, the share of residual angles above 60°,
    the dominant subspace's rank."""
    layers = list(range(pool.n_layers)) if layers is None else list(layers)
    rows = []
    for l in layers:
        h_in, h_out = pool.pair(l)
        for kind in classes:
            t = tokenwise_outputs(pool, l, kind, k=k, exclude_sequence=exclude_sequence, rank=rank, ridge=ridge)
            g = update_geometry(h_in, h_out, t, energy=energy)
            rows.append({"layer": l, "class": kind, "k": k, "exclude_sequence": exclude_sequence,
                         "n_tokens": pool.n_tokens, "cos_update": float(g.cos_update.median()),
                         "cos_update_mean": float(g.cos_update.mean()), "rel_error": float(g.rel_error.median()),
                         "residual_angle": float(g.residual_angle.median()),
                         "share_angle_above_60": float((g.residual_angle > ANGLE_THRESHOLD).float().mean()),
                         "residual_energy": float(g.residual_energy.median()), "dominant_rank": g.rank})
    return pd.DataFrame(rows)
