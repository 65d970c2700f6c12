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

from typing import Callable, Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from .parallel import compute_dtype
from ..errors import InputError

__all__ = [
    "LOCAL_MAPS",
    "fit_local",
    "fit_locals",
    "local_matrix",
    "diag_psd",
    "linear",
    "lowrank",
    "orthogonal",
    "global_linear",
    "tokenwise_fit",
    "tokenwise_fits",
]

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
        gram = x @ x.transpose(1, 2)
        g = gram + lam[:, None, None] * torch.eye(k, dtype=x.dtype, device=x.device)
        rhs = torch.cat([x @ q.transpose(1, 2), gram], 2)  # [b, k, m + k]
        chol, info = torch.linalg.cholesky_ex(g)  # g is positive definite unless lam is 0 and x rank-deficient
        w = torch.cholesky_solve(rhs, chol) if not bool(info.any()) else torch.linalg.solve(g, rhs)
        w_q, w_x = w[:, :, : q.shape[1]], w[:, :, q.shape[1] :]
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
        raise InputError(f"rank must be positive, got {rank}")
    x, y, q = _cast(x, y, q)
    return _reduce_rank(q, *_ridge_update(x, y, q, ridge), rank)


def _reduce_rank(q: Queries, upd_q: Queries, fitted: Batch, rank: int) -> Queries:
    """``q + upd_q V Vᵀ``: the ridge update kept on the top ``rank`` right singular directions ``V``
    of the fitted update ``fitted [b, k, d]``."""
    # top right singular vectors of fitted [b, k, d] from its k x k Gram matrix (k << d)
    evals, evecs = torch.linalg.eigh(fitted @ fitted.transpose(1, 2))  # ascending
    r = min(rank, evals.shape[-1])
    top, u = evals[:, -r:].clamp_min(0), evecs[:, :, -r:]
    keep = top > top[:, -1:] * torch.finfo(q.dtype).eps * 10  # drop null directions (rank < r)
    v = fitted.transpose(1, 2) @ u / top.sqrt().clamp_min(torch.finfo(q.dtype).tiny)[:, None, :]  # [b, d, r]
    v = v * keep[:, None, :]
    return q + (upd_q @ v) @ v.transpose(1, 2)


def orthogonal(x: Batch, y: Batch, q: Queries) -> Queries:
    """Scaled Procrustes ``s Q``: ``Q`` orthogonal in the span of the neighbourhood, identity outside.

    In an orthonormal basis of the joint span whose first ``k`` rows span the inputs (Cholesky-QR,
    twice), the cross-covariance has only ``k`` non-zero rows ``C_t``, so the polar factor is
    ``k x k`` work: its first rows are ``(C_t C_tᵀ)^{-1/2} C_t``, the rest the orthonormal rows closest
    to the identity's (:func:`_orthogonal_fast`), accumulated in float64. Repeated inputs (the
    states of repeated tokens at layer 0) are merged first, which leaves the map unchanged
    (:func:`_merge_repeats`). Neighbourhoods where that is still ill-posed (numerically
    rank-deficient, or ``2k > d``) go to :func:`_orthogonal_svd`, which gives the same map where
    both apply (on float32 inputs the fast path is the closer of the two to the reference run in
    float64)."""
    x, y, q = _cast(x, y, q)
    if 2 * x.shape[1] > x.shape[2]:
        return _orthogonal_svd(x, y, q)
    out = torch.empty_like(q)
    todo = torch.arange(x.shape[0], device=x.device)
    got, ok = _orthogonal_fast(x, y, q)
    out[todo[ok]] = got
    bad = todo[~ok]
    if len(bad):
        out[bad] = _orthogonal_svd(x[bad], y[bad], q[bad])
    return out


def _orthogonal_fast(x: Batch, y: Batch, q: Queries) -> tuple[Queries, Tensor]:
    """:func:`orthogonal` for the well-posed neighbourhoods: ``(T(q) [b', m, d] of those, which they
    are [b])``. A failed check masks a neighbourhood (its values replaced by harmless ones); when
    most fail the first check (repeated states, as in embeddings), the rest runs on the others only.

    The basis is ``B = L⁻¹ z`` for ``z = [x; y - x]`` and ``L`` the Cholesky factor of ``z zᵀ``
    accumulated in float64 (exact for float32 inputs), never formed: ``B`` is orthonormal to about
    ``κ(z)² · 1e-16``, and neighbourhoods with ``κ(z)`` above ~1e4 (by ``L``'s pivots) go to the
    reference. Everything after the Gram matrix is ``2k x 2k`` algebra."""
    b, k, d = x.shape
    f64 = torch.float64
    eps = torch.finfo(x.dtype).eps
    tiny = torch.finfo(f64).tiny
    keep = torch.arange(b, device=x.device)
    # [x; y - x] spans what [x; y] does, better conditioned when the update is small
    x64, u64 = x.to(f64), (y - x).to(f64)
    gxu = x64 @ u64.transpose(1, 2)
    gxx = x64 @ x64.transpose(1, 2)
    gram = torch.cat([torch.cat([gxx, gxu], 2), torch.cat([gxu.transpose(1, 2), u64 @ u64.transpose(1, 2)], 2)], 1)
    x_sq = torch.diagonal(gxx, dim1=1, dim2=2).sum(1)  # ||x||², repeated rows counted each time
    merge, phantom = _merge_repeats(gxx)
    if merge is not None:  # the Gram of the merged rows, a unit-free stand-in for each merged-away slot
        unit = (x_sq / k)[:, None].expand(b, k) * phantom
        gram = merge @ gram @ merge.transpose(1, 2) + torch.diag_embed(torch.cat([unit, unit], 1))
    lz, info = torch.linalg.cholesky_ex(gram)
    pivots = torch.diagonal(lz, dim1=1, dim2=2)
    ok = (info == 0) & (pivots.amin(1) > 1e-4 * pivots.amax(1))
    if int(ok.sum()) < b // 2:
        keep, x64, u64, q, lz, x_sq, ok = keep[ok], x64[ok], u64[ok], q[ok], lz[ok], x_sq[ok], ok[ok]
        if merge is not None:
            merge, unit = merge[keep], unit[keep]
    eye = torch.eye(2 * k, dtype=f64, device=x.device)
    lz = torch.where(ok[:, None, None], lz, eye)  # z = lz @ B: x = [L11, 0] B, y - x = [L21, L22] B
    l11 = lz[:, :k, :k]
    yc = lz[:, k:, :] + torch.nn.functional.pad(l11, (0, k))  # y = [L11 + L21, L22] B
    ct = l11.transpose(1, 2) @ yc  # [n, k, 2k]: the cross-covariance's non-zero rows
    gram_t = ct @ ct.transpose(1, 2)
    finite = torch.isfinite(gram_t).all(-1).all(-1)  # a Cholesky that "succeeded" on a singular Gram
    ok &= finite
    eye_k = torch.eye(k, dtype=f64, device=x.device)
    ev, vec = torch.linalg.eigh(torch.where(finite[:, None, None], gram_t, eye_k))
    # singular values of C below about the reference's regularisation (1e-2 sqrt(eps) of its norm) are
    # directions it leaves free: those neighbourhoods go to the reference
    ok &= ev[:, 0] > 1e-4 * eps * ev[:, -1].clamp_min(tiny)
    ev = ev.clamp_min(tiny)
    top = (vec * ev[:, None, :] ** -0.5) @ vec.transpose(1, 2) @ ct  # [n, k, 2k], orthonormal rows
    t2 = top[:, :, k:]
    # the rows closest to [0, I] orthogonal to top's: m2^{-1/2} ([0, I] - t2ᵀ top), m2 = I - t2ᵀ t2;
    # its eigenvalues are cos² of the angles the map turns the inputs' span by (to ~1e-13 here):
    # turns within ~0.002° of 90° leave the completion ill-posed and go to the reference
    m2 = eye_k - t2.transpose(1, 2) @ t2
    finite = torch.isfinite(m2).all(-1).all(-1)
    ok &= finite
    ev2, vec2 = torch.linalg.eigh(torch.where(finite[:, None, None], m2, eye_k))
    ok &= ev2[:, 0] > 1e-9
    isqrt = (vec2 * ev2.clamp_min(1e-9)[:, None, :] ** -0.5) @ vec2.transpose(1, 2)
    bottom = torch.cat([-(isqrt @ t2.transpose(1, 2)) @ top[:, :, :k], isqrt @ m2], 2)
    turn = torch.cat([top, bottom], 1) - eye  # Ω - I in the basis B, [n, 2k, 2k]
    sigma = ev.sqrt().sum(1)
    if merge is not None:  # each stand-in pair adds a singular value sqrt(2) unit, decoupled from the rest
        sigma = sigma - 2**0.5 * unit.sum(1)
    scale = sigma / x_sq.clamp_min(tiny)  # tr Σ / ||x||²
    # T(q) = s (q + q Bᵀ (Ω - I) B) with B = L⁻¹ z: two triangular solves against q zᵀ
    q64 = q.to(f64)
    zq = torch.cat([x64 @ q64.transpose(1, 2), u64 @ q64.transpose(1, 2)], 1)  # z qᵀ [n, 2k, m]
    if merge is not None:
        zq = merge @ zq
    qc = torch.linalg.solve_triangular(lz, zq, upper=False)  # B qᵀ
    coef = torch.linalg.solve_triangular(lz.transpose(1, 2), turn.transpose(1, 2) @ qc, upper=True).transpose(1, 2)
    if merge is not None:
        coef = coef @ merge
    out = scale[:, None, None] * (q64 + coef[:, :, :k] @ x64 + coef[:, :, k:] @ u64)
    mask = torch.zeros(b, dtype=torch.bool, device=x.device)
    mask[keep[ok]] = True
    return out[ok].to(x.dtype), mask


def _merge_repeats(gxx: Float[Tensor, "b k k"]) -> tuple[Tensor | None, Tensor]:
    """Repeated inputs (rows equal to 1e-6 relative, from their float64 Gram ``gxx``) as one row each:
    ``(T [b, 2k, 2k] with [x'; y' - x'] = T [x; y - x], which slots were merged away [b, k])``, or
    ``(None, ...)`` when nothing repeats.

    A group of ``m`` equal inputs ``x`` with outputs ``y_i`` becomes ``x' = sqrt(m) x`` and
    ``y' = Σ y_i / sqrt(m)``: the same cross-covariance ``Σ x yᵀ`` and ``||x||²``, and a joint span
    that lacks only directions orthogonal to every input, on which the Procrustes map is the
    identity either way; so the map is the one of the unmerged neighbourhood."""
    b, k, _ = gxx.shape
    sq = torch.diagonal(gxx, dim1=1, dim2=2)
    pair = sq[:, :, None] + sq[:, None, :]
    same = pair - 2 * gxx <= 1e-12 * pair  # ||x_i - x_j||² small against ||x_i||² + ||x_j||²
    slot = torch.arange(k, device=gxx.device)
    rep = same.to(torch.int8).argmax(2)  # the first row each row equals (itself if none before)
    if bool((rep == slot).all()):
        return None, torch.zeros(b, k, dtype=gxx.dtype, device=gxx.device)
    for _ in range(k):  # chains of near-equal rows end at a row that represents itself
        nxt = rep.gather(1, rep)
        if bool((nxt == rep).all()):
            break
        rep = nxt
    member = (rep[:, None, :] == slot[None, :, None]).to(gxx.dtype)  # [b, group j, row i]
    count = member.sum(2)  # rows in group j (0: merged away)
    lead = (count > 0).to(gxx.dtype)
    mx = torch.diag_embed(count.sqrt())  # x' = mx x
    my = member / count.clamp_min(1).sqrt()[:, :, None]  # y' = my y
    zero = torch.zeros_like(mx)
    # y' - x' = my (x + (y - x)) - mx x
    merge = torch.cat([torch.cat([mx, zero], 2), torch.cat([my - mx, my], 2)], 1)
    return merge, 1 - lead


def _orthogonal_svd(x: Batch, y: Batch, q: Queries) -> Queries:
    """:func:`orthogonal` by a Householder QR of the joint span and an SVD of its ``2k x 2k``
    cross-covariance (robust to rank deficiency; the fast path's fallback and reference)."""
    b, k, d = x.shape
    basis, _ = torch.linalg.qr(torch.cat([x, y], 1).transpose(1, 2))  # [b, d, min(d, 2k)]
    xc, yc = x @ basis, y @ basis
    c = xc.transpose(1, 2) @ yc  # [b, m, m]
    eye = torch.eye(c.shape[-1], dtype=x.dtype, device=x.device)
    # the polar factor of c + eps I: the Procrustes solution, and among the equally good ones
    # (directions the neighbourhood leaves free) the closest to the identity
    rel = 1e-2 * torch.finfo(x.dtype).eps ** 0.5  # 1.5e-10 (float64), 3.5e-6 (float32)
    # of the Frobenius norm (within sqrt(k) of the largest singular value; a second SVD costs a fifth)
    eps = rel * torch.linalg.matrix_norm(c).clamp_min(torch.finfo(x.dtype).tiny)
    u, _, vh = torch.linalg.svd(c + eps[:, None, None] * eye)
    omega = u @ vh  # xc @ omega ≈ yc
    scale = (omega * c).sum((1, 2)) / (xc * xc).sum((1, 2)).clamp_min(torch.finfo(x.dtype).tiny)  # [b]
    qc = q @ basis
    rotated = q + (qc @ (omega - eye)) @ basis.transpose(1, 2)
    return scale[:, None, None] * rotated


LOCAL_MAPS: dict[str, Callable[..., Tensor]] = {
    "diag_psd": diag_psd,
    "lowrank": lowrank,
    "orthogonal": orthogonal,
    "linear": linear,
}


def _check(kinds: Sequence[str], x: Tensor, y: Tensor, q: Tensor) -> None:
    bad = [c for c in kinds if c not in LOCAL_MAPS]
    if bad or not kinds:
        raise InputError(
            f"unknown local map class {', '.join(map(repr, bad)) or 'list (empty)'}; choose from {sorted(LOCAL_MAPS)}"
        )
    if x.ndim != 3 or x.shape != y.shape or q.ndim != 3 or q.shape[0] != x.shape[0] or q.shape[2] != x.shape[2]:
        raise InputError(
            f"shapes must be x, y [b, k, d] and q [b, m, d]; got {tuple(x.shape)}, {tuple(y.shape)}, {tuple(q.shape)}"
        )


def fit_local(kind: str, x: Batch, y: Batch, q: Queries, **params) -> Queries:
    """``T(q)`` for the local map of class ``kind`` fitted on ``(x, y)``; ``params``: ``rank``, ``ridge``."""
    if not isinstance(kind, str):
        raise InputError(f"kind must be one class name, got {kind!r}; use fit_locals for several")
    _check([kind], x, y, q)
    return LOCAL_MAPS[kind](x, y, q, **params)


def fit_locals(
    kinds: Sequence[str], x: Batch, y: Batch, q: Queries, *, rank: int = 8, ridge: float = 1e-6
) -> dict[str, Queries]:
    """``{kind: T(q)}`` for several classes on the same neighbourhoods: ``linear`` and ``lowrank``
    share one ridge solve; the same results as :func:`fit_local` class by class."""
    _check(kinds, x, y, q)
    if rank < 1:
        raise InputError(f"rank must be positive, got {rank}")
    x, y, q = _cast(x, y, q)
    out: dict[str, Tensor] = {}
    if "linear" in kinds or "lowrank" in kinds:
        upd_q, fitted = _ridge_update(x, y, q, ridge)
        if "linear" in kinds:
            out["linear"] = q + upd_q
        if "lowrank" in kinds:
            out["lowrank"] = _reduce_rank(q, upd_q, fitted, rank)
    for kind in kinds:
        if kind not in out:
            out[kind] = LOCAL_MAPS[kind](x, y, q)
    return {kind: out[kind] for kind in kinds}


def local_matrix(kind: str, x: Batch, y: Batch, **params) -> Float[Tensor, "b d d"]:
    """The map ``A`` itself (``T(q) = q A`` for row vectors), by applying the fit to the basis."""
    b, _, d = x.shape
    eye = torch.eye(d, dtype=compute_dtype(x, y), device=x.device).expand(b, d, d)
    return fit_local(kind, x, y, eye, **params)


def global_linear(x: Float[Tensor, "n d"], y: Float[Tensor, "n d"], ridge: float = 1e-6) -> Float[Tensor, "d d"]:
    """One linear map ``A = I + M`` for the whole pool (``T(q) = q A``), ridge towards identity."""
    if x.ndim != 2 or x.shape != y.shape:
        raise InputError(f"x and y must both be [n, d], got {tuple(x.shape)} and {tuple(y.shape)}")
    d = x.shape[1]
    x, y = _cast(x, y)
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    upd, _ = _ridge_update(x[None], y[None], eye[None], ridge)
    return eye + upd[0]


def tokenwise_fit(
    kind: str, h_in: Float[Tensor, "n d"], h_out: Float[Tensor, "n d"], neighbours: Tensor, *, chunk: int = 64, **params
) -> Float[Tensor, "n d"]:
    """``T(h_in[i])`` for every token ``i``, each map fitted on its ``neighbours[i] [k]`` (indices
    into the pool, the token itself excluded), ``chunk`` tokens at a time."""
    if not isinstance(kind, str):
        raise InputError(f"kind must be one class name, got {kind!r}; use tokenwise_fits for several")
    return tokenwise_fits([kind], h_in, h_out, neighbours, chunk=chunk, **params)[kind]


def tokenwise_fits(
    kinds: Sequence[str],
    h_in: Float[Tensor, "n d"],
    h_out: Float[Tensor, "n d"],
    neighbours: Tensor,
    *,
    chunk: int = 64,
    threads: int = 1,
    **params,
) -> dict[str, Float[Tensor, "n d"]]:
    """:func:`tokenwise_fit` for several classes at once: each chunk's neighbourhoods are gathered
    once for all of them (:func:`fit_locals`); ``threads`` chunks run side by side, each on one
    core (the batched small factorizations of ``lowrank`` and ``orthogonal`` use one core each)."""
    if h_in.shape != h_out.shape or h_in.ndim != 2:
        raise InputError(f"h_in and h_out must both be [n, d], got {tuple(h_in.shape)} and {tuple(h_out.shape)}")
    if neighbours.ndim != 2 or neighbours.shape[0] != h_in.shape[0]:
        raise InputError(f"neighbours must be [n, k] with n = {h_in.shape[0]}, got {tuple(neighbours.shape)}")
    if chunk < 1 or threads < 1:
        raise InputError(f"chunk and threads must be positive, got {chunk} and {threads}")
    starts = range(0, h_in.shape[0], chunk)

    def one(s: int) -> dict[str, Tensor]:
        nb = neighbours[s : s + chunk]
        got = fit_locals(kinds, h_in[nb], h_out[nb], h_in[s : s + chunk, None], **params)
        return {kind: t[:, 0] for kind, t in got.items()}

    if threads == 1:
        parts = [one(s) for s in starts]
    else:  # each worker single-threaded: the batched small factorizations run one per core
        from concurrent.futures import ThreadPoolExecutor

        intra = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with ThreadPoolExecutor(threads) as ex:
                parts = list(ex.map(one, starts))
        finally:
            torch.set_num_threads(intra)
    return {kind: torch.cat([p[kind] for p in parts]) for kind in kinds}
