"""Perpendicular-aware reconstruction of a pruned linear layer (pure; no models).

A layer ``y = W x`` that writes a residual update is pruned to the mask ``keep``.
Its kept weights ``V`` (zero where pruned) are refit to minimise, over calibration
tokens ``t``, the error ``e_t = (V - W) x_t`` split relative to the dense output
direction ``u_t = y_t / ||y_t||``::

    f(V) = sum_t ||e_t||^2 - (1 - lam) (u_t . e_t)^2  +  damp * ||keep * (V - W)||^2
         = perp(V) + lam * par(V) + ridge

``lam = 1`` is SparseGPT's isotropic least squares; ``lam = 0`` the perpendicular
error only (``lam > 1``, the parallel error weighted more, is the opposite control). The per-token direction couples
the output rows, so the normal
equations are not row-separable: :func:`perp_refit` solves them with
Jacobi-preconditioned conjugate gradients on the kept entries (matrix-free, three
``[T, in] x [in, out]`` products an iteration). ``damp`` is SparseGPT's dampening
(a fraction of the mean diagonal of ``H = X^T X``).

**Isotropic guard.** With ``lam < 1`` the parallel error is less controlled, so the
isotropic error ``iso(V) = sum_t ||e_t||^2`` could grow. The result never has
``iso`` above ``(1 + max_iso_increase) * iso(W * keep)`` -- the unreconstructed mask --
when the start satisfies it: the CG solution is pulled back along the segment from
the start (where the convex ``f`` does not increase) to the largest step that keeps
the bound. :class:`RefitResult` reports every energy, so the claim can be checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from ..errors import InputError

__all__ = ["RefitResult", "layer_energies", "perp_refit"]


@dataclass(frozen=True)
class RefitResult:
    """A refit weight and its error energies (sums over tokens, absolute)."""

    weight: Float[Tensor, "out inp"]
    iso_mask: float  # isotropic error of W * keep (no reconstruction)
    iso_start: float  # ... of the start (e.g. SparseGPT's solution)
    iso_after: float
    perp_start: float
    perp_after: float
    par_start: float
    par_after: float
    iterations: int
    residual: float  # final ||r|| / ||r_0|| of the normal equations (r_0 at the start)
    step: float  # fraction of the CG move kept by the isotropic guard (1 = all of it)
    iso_bound: float  # (1 + max_iso_increase) * iso_mask

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "weight"}


def _directions(y: Tensor) -> Tensor:
    n = y.norm(dim=-1, keepdim=True)
    return torch.where(n > 0, y / n.clamp_min(torch.finfo(y.dtype).tiny), torch.zeros_like(y))


def layer_energies(
    V: Float[Tensor, "out inp"],
    W: Float[Tensor, "out inp"],
    X: Float[Tensor, "tok inp"],
    U: Float[Tensor, "tok out"],
) -> tuple[float, float]:
    """``(perp, par)``: summed perpendicular and parallel energies of ``e_t = (V - W) x_t``
    relative to the unit directions ``U`` (a zero row of ``U`` counts as all perpendicular)."""
    E = X @ (V - W).t()  # [T, out]
    iso = float(E.pow(2).sum())
    par = float(((E * U).sum(-1)).pow(2).sum())
    return iso - par, par


def _check_refit_args(
    W: Tensor, keep: Tensor, X: Tensor, Y: Tensor, lam: float, damp: float, iters: int, max_iso_increase: float
) -> None:
    """Raise on a bad weight / penalty / shape argument of :func:`perp_refit`."""
    if not 0.0 <= lam < float("inf"):
        raise InputError(f"lam must be finite and >= 0, got {lam}")
    if damp < 0 or max_iso_increase < 0 or iters < 0:
        raise InputError(f"damp, max_iso_increase and iters must be >= 0, got {damp}, {max_iso_increase}, {iters}")
    out, inp = W.shape
    if keep.shape != W.shape or X.shape[-1] != inp or Y.shape != (X.shape[0], out):
        raise InputError(
            f"shapes do not fit: W {tuple(W.shape)}, keep {tuple(keep.shape)}, X {tuple(X.shape)}, Y {tuple(Y.shape)}"
        )


def _iso(Z: Tensor, W0: Tensor, H: Tensor) -> float:
    """The isotropic error ``tr((Z - W0) H (Z - W0)^T)`` of weights ``Z`` against the dense ``W0``."""
    return float(((Z - W0) @ H * (Z - W0)).sum())


def _pcg(
    apply: Callable[[Tensor], Tensor], b: Tensor, precond: Tensor, Z: Tensor, iters: int, tol: float
) -> tuple[Tensor, int, float]:
    """Preconditioned conjugate gradients on ``apply(Z) = b`` from ``Z`` (updated in place): ``(Z, iterations,
    residual relative to the start's)``."""
    r = b - apply(Z)
    bn = float(r.norm()) or 1.0  # convergence relative to the start's residual
    z = r / precond
    p = z.clone()
    rz = float((r * z).sum())
    k, res = 0, float(r.norm()) / bn
    while k < iters and res > tol:
        Ap = apply(p)
        pAp = float((p * Ap).sum())
        if not math.isfinite(pAp) or pAp <= 0:
            break
        alpha = rz / pAp
        Z += alpha * p
        r -= alpha * Ap
        k += 1
        res = float(r.norm()) / bn
        z = r / precond
        rz_new = float((r * z).sum())
        p = z + (rz_new / rz) * p
        rz = rz_new
    return Z, k, res


def _guard_step(Z0: Tensor, Z: Tensor, W0: Tensor, H: Tensor, bound: float) -> float:
    """The isotropic guard: the largest step s in [0, 1] along ``Z0 -> Z`` with iso <= ``bound``."""
    D0, S = Z0 - W0, Z - Z0
    i0, i1, i2 = _iso(Z0, W0, H), 2 * float((D0 @ H * S).sum()), float((S @ H * S).sum())
    step = 1.0
    if i0 + i1 + i2 > bound and i2 > 0:
        disc = i1 * i1 - 4 * i2 * (i0 - bound)
        step = max(0.0, min(1.0, (-i1 + math.sqrt(max(disc, 0.0))) / (2 * i2)))
    return step


def perp_refit(
    W: Float[Tensor, "out inp"],
    keep: Bool[Tensor, "out inp"],
    X: Float[Tensor, "tok inp"],
    Y: Float[Tensor, "tok out"],
    *,
    lam: float = 0.0,
    damp: float = 0.01,
    start: Float[Tensor, "out inp"] | None = None,
    iters: int = 30,
    tol: float = 1e-3,
    max_iso_increase: float = 0.0,
) -> RefitResult:
    """Refit the kept weights of ``W`` to minimise ``perp + lam * par`` (module docstring).

    ``X``: the layer's calibration inputs; ``Y``: its dense outputs (their directions
    define ``u_t``; a bias may be included). ``start``: initial weights on the mask
    (default ``W * keep``); entries outside ``keep`` are ignored. Computed in float32
    (float64 for float64 ``W``); the weight comes back in ``W``'s dtype.
    """
    _check_refit_args(W, keep, X, Y, lam, damp, iters, max_iso_increase)
    dt = torch.float64 if W.dtype == torch.float64 else torch.float32
    W0, X, U = W.to(dt), X.to(dt), _directions(Y.to(dt))
    M = keep.to(dt)
    H = X.t() @ X
    delta = damp * float(H.diagonal().mean())
    c = 1.0 - lam

    def apply(Z: Tensor) -> Tensor:  # the normal-equation operator on masked Z
        a = ((X @ Z.t()) * U).sum(-1)  # [T]: u_t . Z x_t
        return M * (Z @ H - c * ((U * a[:, None]).t() @ X) + delta * Z)

    # b = keep * (W H - c sum_t (u_t . W x_t) u_t x_t^T + delta W)
    a0 = ((X @ W0.t()) * U).sum(-1)
    b = M * (W0 @ H - c * ((U * a0[:, None]).t() @ X) + delta * W0)
    precond = (H.diagonal()[None, :] - c * (U.pow(2).t() @ X.pow(2)) + delta).clamp_min(1e-12)

    Z0 = (W0 * M) if start is None else start.to(dt) * M
    iso_mask = _iso(W0 * M, W0, H)
    bound = (1.0 + max_iso_increase) * iso_mask
    if _iso(Z0, W0, H) > bound * (1 + 1e-6):  # a start outside the guard: begin at the mask
        Z0 = W0 * M
    Z, k, res = _pcg(apply, b, precond, Z0.clone(), iters, tol)
    step = _guard_step(Z0, Z, W0, H, bound)
    Z = Z0 + step * (Z - Z0)
    perp0, par0 = layer_energies(Z0, W0, X, U)
    perp1, par1 = layer_energies(Z, W0, X, U)
    return RefitResult(
        weight=Z.to(W.dtype),
        iso_mask=iso_mask,
        iso_start=perp0 + par0,
        iso_after=perp1 + par1,
        perp_start=perp0,
        perp_after=perp1,
        par_start=par0,
        par_after=par1,
        iterations=k,
        residual=res,
        step=step,
        iso_bound=bound,
    )
