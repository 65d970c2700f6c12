"""Local tokenwise maps ``T(x) = A x`` fitted by least squares on a neighbourhood (torch only).

Each class fits, for every query ``b`` of a batch, a map from the neighbours'
inputs ``X[b] [k, d]`` to their outputs ``Y[b] [k, d]`` (rows are states) and
applies it to query vectors ``q[b] [m, d]``; everything is batched over ``b``.

With ``k`` neighbours in ``d`` dimensions and ``k < d`` a dense or orthogonal map
is not determined by the neighbourhood. How each class is completed outside the
neighbours' span:

* ``diag_psd``: ``A = diag(a)``, ``a_j = max(0, <X_j, Y_j> / ||X_j||²)`` per
  coordinate; a coordinate the neighbours never use keeps ``a_j = 1``.
* ``linear``: ``A = I + M``, ``M`` the ridge solution of ``Y - X ≈ X M``
  (``ridge`` x the mean squared neighbour norm): the minimum-norm ``M`` as
  ``ridge → 0``, so ``A`` is the identity on directions orthogonal to the
  neighbours' inputs (*ridge towards identity*).
* ``lowrank``: ``A = I + U Vᵀ`` of rank ``r``: the ``linear`` fit restricted to the
  top ``r`` right singular directions of its fitted update (reduced-rank
  regression); identity outside, as ``linear``.
* ``orthogonal``: ``A = s Q`` (scaled Procrustes): ``Q`` is the best orthogonal map
  inside the span of the neighbours' inputs and outputs and the identity on its
  orthogonal complement; ``s = tr(Σ) / ||X||²`` scales everything.
"""

from __future__ import annotations

from typing import Callable

import torch
from jaxtyping import Float
from torch import Tensor

from .parallel import compute_dtype

__all__ = ["LOCAL_MAPS", "fit_local", "local_matrix", "diag_psd", "linear", "lowrank", "orthogonal",
           "global_linear", "tokenwise_fit"]

Batch = Float[Tensor, "b k d"]
Queries = Float[Tensor, "b m d"]


def _cast(*ts: Tensor) -> list[Tensor]:
    dt = compute_dtype(*ts)
    return [t.to(dt) for t in ts]


def diag_psd(x: Batch, y: Batch, q: Queries) -> Queries:
    """Per-coordinate non-negative scale (identity where a coordinate has no signal)."""
    x, y, q = _cast(x, y, q)
    num, den = (x * y).sum(1), (x * x).sum(1)  # [b, d]
    a = torch.where(den > 0, (num / den.clamp_min(torch.finfo(x.dtype).tiny)).clamp_min(0), torch.ones_like(den))
    return q * a[:, None, :]


def _ridge_update(x: Batch, y: Batch, q: Queries, ridge: float) -> tuple[Queries, Tensor]:
    """``q M`` for the ridge solution ``M`` of ``y - x ≈ x M``, and the fitted update ``x M``.

    Solved in the smaller of the kernel (``k x k``) and primal (``d x d``) forms."""
    r = y - x
    b, k, d = x.shape
    lam = ridge * (x * x).sum((1, 2)) / k  # [b]: scale-free
    if k <= d:
        g = x @ x.transpose(1, 2) + lam[:, None, None] * torch.eye(k, dtype=x.dtype, device=x.device)
        w_q = torch.linalg.solve(g, x @ q.transpose(1, 2))  # [b, k, m]
        w_x = torch.linalg.solve(g, x @ x.transpose(1, 2))  # [b, k, k]
        return w_q.transpose(1, 2) @ r, w_x.transpose(1, 2) @ r
    a = x.transpose(1, 2) @ x + lam[:, None, None] * torch.eye(d, dtype=x.dtype, device=x.device)
    m = torch.linalg.solve(a, x.transpose(1, 2) @ r)  # [b, d, d]
    return q @ m, x @ m


def linear(x: Batch, y: Batch, q: Queries, ridge: float = 1e-6) -> Queries:
    """Full local linear map, ridge towards the identity."""
    x, y, q = _cast(x, y, q)
    upd, _ = _ridge_update(x, y, q, ridge)
    return q + upd


def lowrank(x: Batch, y: Batch, q: Queries, rank: int = 8, ridge: float = 1e-6) -> Queries:
    """``A = I + U Vᵀ`` of rank ``rank`` (reduced-rank regression on the neighbourhood)."""
    if rank < 1:
        raise ValueError(f"rank must be positive, got {rank}")
    x, y, q = _cast(x, y, q)
    upd_q, fitted = _ridge_update(x, y, q, ridge)
    # top right singular vectors of fitted [b, k, d] from its k x k Gram matrix (k << d)
    evals, evecs = torch.linalg.eigh(fitted @ fitted.transpose(1, 2))  # ascending
    r = min(rank, evals.shape[-1])
    top, u = evals[:, -r:].clamp_min(0), evecs[:, :, -r:]
    keep = top > top[:, -1:] * torch.finfo(x.dtype).eps * 10  # drop null directions (rank < r)
    v = fitted.transpose(1, 2) @ u / top.sqrt().clamp_min(torch.finfo(x.dtype).tiny)[:, None, :]  # [b, d, r]
    v = v * keep[:, None, :]
    return q + (upd_q @ v) @ v.transpose(1, 2)


def orthogonal(x: Batch, y: Batch, q: Queries) -> Queries:
    """Scaled Procrustes ``s Q``: ``Q`` orthogonal in the span of the neighbourhood, identity outside."""
    x, y, q = _cast(x, y, q)
    b, k, d = x.shape
    basis, _ = torch.linalg.qr(torch.cat([x, y], 1).transpose(1, 2))  # [b, d, min(d, 2k)]
    xc, yc = x @ basis, y @ basis
    c = xc.transpose(1, 2) @ yc  # [b, m, m]
    eye = torch.eye(c.shape[-1], dtype=x.dtype, device=x.device)
    # the polar factor of c + eps I: the Procrustes solution, and among the equally good ones
    # (directions the neighbourhood leaves free) the closest to the identity
    rel = 1e-2 * torch.finfo(x.dtype).eps ** 0.5  # 1.5e-10 (float64), 3.5e-6 (float32)
    eps = rel * torch.linalg.matrix_norm(c, ord=2).clamp_min(torch.finfo(x.dtype).tiny)
    u, _, vh = torch.linalg.svd(c + eps[:, None, None] * eye)
    omega = u @ vh  # xc @ omega ≈ yc
    scale = (omega * c).sum((1, 2)) / (xc * xc).sum((1, 2)).clamp_min(torch.finfo(x.dtype).tiny)  # [b]
    qc = q @ basis
    rotated = q + (qc @ (omega - eye)) @ basis.transpose(1, 2)
    return scale[:, None, None] * rotated


LOCAL_MAPS: dict[str, Callable[..., Tensor]] = {
    "diag_psd": diag_psd, "lowrank": lowrank, "orthogonal": orthogonal, "linear": linear,
}


def fit_local(kind: str, x: Batch, y: Batch, q: Queries, **params) -> Queries:
    """``T(q)`` for the local map of class ``kind`` fitted on ``(x, y)``; ``params``: ``rank``, ``ridge``."""
    if kind not in LOCAL_MAPS:
        raise ValueError(f"unknown local map class {kind!r}; choose from {sorted(LOCAL_MAPS)}")
    if x.ndim != 3 or x.shape != y.shape or q.ndim != 3 or q.shape[0] != x.shape[0] or q.shape[2] != x.shape[2]:
        raise ValueError(f"shapes must be x, y [b, k, d] and q [b, m, d]; got {tuple(x.shape)}, "
                         f"{tuple(y.shape)}, {tuple(q.shape)}")
    return LOCAL_MAPS[kind](x, y, q, **params)


def local_matrix(kind: str, x: Batch, y: Batch, **params) -> Float[Tensor, "b d d"]:
    """The map ``A`` itself (``T(q) = q A`` for row vectors), by applying the fit to the basis."""
    b, _, d = x.shape
    eye = torch.eye(d, dtype=compute_dtype(x, y), device=x.device).expand(b, d, d)
    return fit_local(kind, x, y, eye, **params)


def global_linear(x: Float[Tensor, "n d"], y: Float[Tensor, "n d"], ridge: float = 1e-6) -> Float[Tensor, "d d"]:
    """One linear map ``A = I + M`` for the whole pool (``T(q) = q A``), ridge towards identity."""
    if x.ndim != 2 or x.shape != y.shape:
        raise ValueError(f"x and y must both be [n, d], got {tuple(x.shape)} and {tuple(y.shape)}")
    d = x.shape[1]
    x, y = _cast(x, y)
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    upd, _ = _ridge_update(x[None], y[None], eye[None], ridge)
    return eye + upd[0]


def tokenwise_fit(kind: str, h_in: Float[Tensor, "n d"], h_out: Float[Tensor, "n d"], neighbours: Tensor, *,
                  chunk: int = 256, **params) -> Float[Tensor, "n d"]:
    """``T(h_in[i])`` for every token ``i``, each map fitted on its ``neighbours[i] [k]`` (indices
    into the pool, the token itself excluded), ``chunk`` tokens at a time."""
    if h_in.shape != h_out.shape or h_in.ndim != 2:
        raise ValueError(f"h_in and h_out must both be [n, d], got {tuple(h_in.shape)} and {tuple(h_out.shape)}")
    if neighbours.ndim != 2 or neighbours.shape[0] != h_in.shape[0]:
        raise ValueError(f"neighbours must be [n, k] with n = {h_in.shape[0]}, got {tuple(neighbours.shape)}")
    out = []
    for s in range(0, h_in.shape[0], chunk):
        nb = neighbours[s : s + chunk]
        out.append(fit_local(kind, h_in[nb], h_out[nb], h_in[s : s + chunk, None], **params)[:, 0])
    return torch.cat(out)
