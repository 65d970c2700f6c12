"""Local tokenwise fits of every layer map over a state pool, and the geometry of what they leave.

For layer map ``l`` of a :class:`~tlgeo.tokenwise.pool.StatePool`, every token's
``k`` nearest neighbours in ``h_l`` (leave-one-out; with ``exclude_sequence``
also no token of its own window) are found once and cached in the pool's
directory; each local class (:data:`tlgeo.geometry.local_maps.LOCAL_MAPS`) is
fitted on each token's neighbourhood and applied to the token
(:func:`tlgeo.geometry.local_maps.tokenwise_fit`), and the ``global`` baseline is
one ridge linear map for the whole pool, ``mlp`` one small residual MLP
(``x + MLP(x)``) for the whole pool. The two pool-wide classes are cross-fitted:
the windows are split in two folds by parity, and each fold is predicted by the
map fitted on the other, so no token is fitted on itself or its own sequence.
:func:`layer_geometry` returns one row per (layer, class) from
:func:`tlgeo.geometry.update_split.update_geometry`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from ..errors import InputError
from ..geometry.local_maps import LOCAL_MAPS, global_linear, tokenwise_fits
from ..geometry.neighbours import knn
from ..geometry.update_split import update_geometry
from ..storage import atomic_write
from .pool import StatePool

__all__ = [
    "CLASSES",
    "POOL_CLASSES",
    "neighbours",
    "fit_mlp",
    "cross_fit",
    "tokenwise_outputs",
    "layer_outputs",
    "local_params",
    "geometry_row",
    "layer_geometry",
]

POOL_CLASSES = ("global", "mlp")  # one map per layer for the whole pool
CLASSES = (*LOCAL_MAPS, *POOL_CLASSES)
ANGLE_THRESHOLD = 60.0  # degrees: the paper's "large angular deviation"


def neighbours(
    pool: StatePool, layer: int, k: int, *, exclude_sequence: bool = True, chunk: int = 1024, backend: str = "torch"
) -> torch.Tensor:
    """``[n_tokens, k]`` neighbour indices of every token in ``h_layer`` (cached in the pool's directory;
    ``backend``: ``torch`` or ``faiss``, the same exact search)."""
    path = Path(pool.directory) / f"neighbours_l{layer}_k{k}_{'xseq' if exclude_sequence else 'loo'}.npy"
    if path.exists():
        return torch.from_numpy(np.load(path))
    h, _ = pool.pair(layer)
    groups = torch.from_numpy(pool.window)
    _, idx = knn(h, k, groups=groups, exclude_group=exclude_sequence, chunk=chunk, backend=backend)
    with atomic_write(path, "wb") as f:  # a kill mid-write leaves no half file to load next time
        np.save(f, idx.numpy())
    return idx


def fit_mlp(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    hidden: int = 256,
    epochs: int = 10,
    batch_size: int = 256,
    lr: float = 1e-3,
    seed: int = 0,
):
    """A small residual MLP ``q -> q + MLP(q)`` fitted to ``y ≈ x + MLP(x)`` (Adam, mean squared
    error on states scaled by their median norm). Returns the map."""
    from torch import nn

    g = torch.Generator().manual_seed(seed)
    scale = float(x.norm(dim=-1).median().clamp_min(1e-12))
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(x.shape[1], hidden), nn.GELU(), nn.Linear(hidden, x.shape[1]))
    nn.init.zeros_(net[2].weight)
    nn.init.zeros_(net[2].bias)  # starts as the identity map
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    xs, rs = x / scale, (y - x) / scale
    with torch.enable_grad():
        for _ in range(epochs):
            for idx in torch.randperm(len(x), generator=g).split(batch_size):
                loss = ((net(xs[idx]) - rs[idx]) ** 2).sum(-1).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    net.eval()

    def apply(q: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return q + net(q / scale) * scale

    return apply


def cross_fit(fit, h_in: torch.Tensor, h_out: torch.Tensor, windows: np.ndarray, folds: int = 2) -> torch.Tensor:
    """Out-of-fold predictions: tokens of windows ``w % folds == f`` mapped by ``fit(x, y)`` trained
    on the other folds."""
    fold = torch.from_numpy(np.asarray(windows) % folds)
    if len(fold.unique()) < 2:
        raise InputError("cross-fitting needs tokens from at least two windows")
    out = torch.empty_like(h_in)
    for f in fold.unique():
        test = fold == f
        out[test] = fit(h_in[~test], h_out[~test])(h_in[test]).to(out.dtype)
    return out


def tokenwise_outputs(
    pool: StatePool,
    layer: int,
    kind: str,
    *,
    k: int = 32,
    exclude_sequence: bool = True,
    rank: int = 8,
    ridge: float = 1e-3,
    chunk: int = 64,
    mlp_epochs: int = 10,
    threads: int = 1,
) -> torch.Tensor:
    """``T(h_layer)`` of every token under class ``kind`` (float32 ``[n_tokens, d_model]``)."""
    return layer_outputs(
        pool,
        layer,
        [kind],
        k=k,
        exclude_sequence=exclude_sequence,
        rank=rank,
        ridge=ridge,
        chunk=chunk,
        mlp_epochs=mlp_epochs,
        threads=threads,
    )[kind]


def layer_outputs(
    pool: StatePool,
    layer: int,
    kinds: Sequence[str],
    *,
    k: int = 32,
    exclude_sequence: bool = True,
    rank: int = 8,
    ridge: float = 1e-3,
    chunk: int = 64,
    mlp_epochs: int = 10,
    threads: int = 1,
) -> dict[str, torch.Tensor]:
    """``{kind: T(h_layer)}`` for several classes of one layer map: the local ones share each
    token's gathered neighbourhood (:func:`tlgeo.geometry.local_maps.tokenwise_fits`)."""
    bad = [c for c in kinds if c not in CLASSES]
    if bad or not kinds:
        raise InputError(f"unknown map class {', '.join(map(repr, bad)) or 'list (empty)'}; choose from {CLASSES}")
    h_in, h_out = pool.pair(layer)
    out: dict[str, torch.Tensor] = {}
    if "global" in kinds:
        out["global"] = cross_fit(
            lambda x, y: lambda q, a=global_linear(x, y, ridge=ridge).float(): q @ a, h_in, h_out, pool.window
        )
    if "mlp" in kinds:
        out["mlp"] = cross_fit(lambda x, y: fit_mlp(x, y, epochs=mlp_epochs), h_in, h_out, pool.window)
    local = [c for c in kinds if c in LOCAL_MAPS]
    if local:
        nb = neighbours(pool, layer, k, exclude_sequence=exclude_sequence)
        got = tokenwise_fits(local, h_in, h_out, nb, chunk=chunk, threads=threads, rank=rank, ridge=ridge)
        out.update({c: t.float() for c, t in got.items()})
    return {c: out[c] for c in kinds}


def local_params(kind: str, rank: int, ridge: float) -> dict:
    """The keyword arguments local class ``kind`` takes."""
    return {"rank": rank, "ridge": ridge} if kind == "lowrank" else {"ridge": ridge} if kind == "linear" else {}


def layer_geometry(
    pool: StatePool,
    layers: Iterable[int] | None = None,
    classes: Sequence[str] = CLASSES,
    *,
    k: int = 32,
    exclude_sequence: bool = True,
    rank: int = 8,
    ridge: float = 1e-3,
    energy: float = 0.9,
    threads: int = 1,
) -> pd.DataFrame:
    """One row per (layer, class): medians over tokens of ``cos_update``, ``rel_error``,
    ``residual_angle`` and ``residual_energy``, the share of residual angles above 60°,
    the dominant subspace's rank."""
    layers = list(range(pool.n_layers)) if layers is None else list(layers)
    rows = []
    for l in layers:
        h_in, h_out = pool.pair(l)
        outs = layer_outputs(
            pool, l, classes, k=k, exclude_sequence=exclude_sequence, rank=rank, ridge=ridge, threads=threads
        )
        for kind, t in outs.items():
            row, _ = geometry_row(h_in, h_out, t, energy)
            rows.append(
                {
                    "layer": l,
                    "class": kind,
                    "k": k,
                    "exclude_sequence": exclude_sequence,
                    "n_tokens": pool.n_tokens,
                    **row,
                }
            )
    return pd.DataFrame(rows)


def geometry_row(h_in: torch.Tensor, h_out: torch.Tensor, t_out: torch.Tensor, energy: float = 0.9):
    """``(summary, per_token)``: the medians of :func:`update_geometry` over tokens (and the share of
    residual angles above 60°), and the per-token :class:`UpdateGeometry` itself."""
    g = update_geometry(h_in, h_out, t_out, energy=energy)
    return {
        "cos_update": float(g.cos_update.median()),
        "cos_update_mean": float(g.cos_update.mean()),
        "rel_error": float(g.rel_error.median()),
        "residual_angle": float(g.residual_angle.median()),
        "share_angle_above_60": float((g.residual_angle > ANGLE_THRESHOLD).float().mean()),
        "residual_energy": float(g.residual_energy.median()),
        "dominant_rank": g.rank,
    }, g
