"""Prediction-anchored subspaces (PDSF): split each state into P, D, S and F (torch only).

For states ``h [n, d]`` and their prediction directions ``u [n, d]`` (unit
unembedding vectors of each state's predicted token, :func:`prediction_directions`):

* ``P``: the projection ``(h·u) u`` on the state's own prediction direction;
* ``D``: a PCA basis ``[d, k_D]`` of the P-residuals ``h - P`` over a prompt set;
* ``S``: a PCA basis ``[d, k_S]`` of what is left after P and D;
* ``F``: the orthogonal complement, ``h - P - D - S``.

Two variants of the split (``mode``):

* ``exact``: each state's D basis has its own ``u`` projected out (and S has ``u`` and
  that D), so the four parts are mutually orthogonal for every state and sum to ``h``;
* ``faithful``: the authors' shared bases, ``D = B_D B_Dᵀ (h - P)`` and
  ``S = B_S B_Sᵀ (h - P - D)``: the parts sum to ``h`` but D is orthogonal to ``u``
  only on average (the P-residuals differ per prompt).

Ranks are fixed or ``round(participation ratio)`` of the residual's PCA spectrum,
clipped (the authors: ``[2, 12]`` for D, ``[4, 16]`` for S).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from .parallel import compute_dtype
from ..errors import InputError

__all__ = [
    "PARTS",
    "PDSFBasis",
    "prediction_directions",
    "participation_ratio",
    "pca_basis",
    "fit_pdsf",
    "own_bases",
    "split_pdsf",
    "energy_shares",
    "subspace_participation",
    "axis_angles",
]

PARTS = ("P", "D", "S", "F")
D_BOUNDS, S_BOUNDS = (2, 12), (4, 16)


def prediction_directions(
    w_u: Float[Tensor, "d vocab"], tokens: Int[Tensor, "n"], norm_weight: Float[Tensor, "d"] | None = None
) -> Float[Tensor, "n d"]:
    """Unit unembedding directions ``u_hat`` of ``tokens``. With ``norm_weight`` (the final RMS/LayerNorm
    scale ``w``), the direction ``w ⊙ W_U[:, t]``: the one the *un-normalised* state is read along
    (``logit_t ∝ (w ⊙ h)·W_U[:, t]``); without it, the raw column as the authors use it."""
    if w_u.ndim != 2:
        raise InputError(f"the unembedding must be [d, vocab], got shape {tuple(w_u.shape)}")
    u = w_u[:, tokens].T.to(compute_dtype(w_u))
    if norm_weight is not None:
        u = u * norm_weight.to(u.dtype)
    return u / u.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(u.dtype).tiny)


def participation_ratio(eigvals: Float[Tensor, "... k"]) -> Float[Tensor, "..."]:
    """``(Σ λ)² / Σ λ²`` of a variance spectrum (0 for an all-zero spectrum)."""
    lam = eigvals.clamp_min(0)
    den = (lam * lam).sum(-1)
    return torch.where(den > 0, lam.sum(-1) ** 2 / den.clamp_min(torch.finfo(lam.dtype).tiny), torch.zeros_like(den))


def pca_basis(
    x: Float[Tensor, "n d"], k: int | None = None, *, center: bool = True, bounds: tuple[int, int] = D_BOUNDS
) -> tuple[Float[Tensor, "d k"], Float[Tensor, "r"]]:
    """``(basis, spectrum)``: the top principal axes of ``x`` (rows: points) and the variance spectrum.
    ``k=None``: ``round(PR)`` of the spectrum clipped to ``bounds``, and never more than the rank."""
    n, d = x.shape
    if n < 2:
        raise InputError(f"a PCA basis needs at least 2 points, got {n}")
    x = x.to(compute_dtype(x))
    if center:
        x = x - x.mean(0)
    _, s, vh = torch.linalg.svd(x, full_matrices=False)
    spectrum = s * s / (n - 1 if center else n)
    rank = int((s > s[0] * torch.finfo(x.dtype).eps * max(n, d)).sum()) if len(s) else 0
    if k is None:  # the authors: max(lo, min(hi, round(PR), n - 1)), Python's round (half to even)
        lo, hi = bounds
        k = max(lo, min(hi, int(round(float(participation_ratio(spectrum)))), n - 1))
    if not isinstance(k, int) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    if k > min(n, d):
        raise InputError(f"k={k} principal axes asked of {n} points in {d} dimensions")
    return vh[: min(k, max(rank, 1))].T, spectrum


@dataclass
class PDSFBasis:
    """Shared bases of one layer: ``D [d, k_D]`` and ``S [d, k_S]`` (orthonormal columns, ``S ⟂ D``),
    their fit spectra, and the settings they were fitted with."""

    D: Tensor
    S: Tensor
    spectrum_D: Tensor
    spectrum_S: Tensor
    center: bool
    mode: str

    @property
    def k_D(self) -> int:
        return self.D.shape[1]

    @property
    def k_S(self) -> int:
        return self.S.shape[1]


def _unit(u: Tensor) -> Tensor:
    """Rows scaled to unit norm in their own precision (zero rows stay zero)."""
    return u / u.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(u.dtype).tiny)


def _remove(h: Tensor, u: Tensor) -> Tensor:
    """``h - (h·u) u`` per row (``u`` unit)."""
    return h - (h * u).sum(-1, keepdim=True) * u


def fit_pdsf(
    h: Float[Tensor, "n d"],
    u: Float[Tensor, "n d"],
    *,
    k_D: int | None = None,
    k_S: int | None = None,
    center: bool = True,
    mode: str = "exact",
    bounds_D: tuple[int, int] = D_BOUNDS,
    bounds_S: tuple[int, int] = S_BOUNDS,
) -> PDSFBasis:
    """Fit D on the P-residuals of ``h`` and S on what D leaves (PCA over the ``n`` states)."""
    _check(h, u, mode)
    dt = compute_dtype(h, u)
    h, u = h.to(dt), _unit(u.to(dt))
    r = _remove(h, u)
    d_basis, spec_d = pca_basis(r, k_D, center=center, bounds=bounds_D)
    r2 = r - (r @ d_basis) @ d_basis.T
    s_basis, spec_s = pca_basis(r2, k_S, center=center, bounds=bounds_S)
    s_basis = s_basis - d_basis @ (d_basis.T @ s_basis)  # exactly ⟂ D (r2 is, up to rounding)
    s_basis, _ = torch.linalg.qr(s_basis)
    return PDSFBasis(d_basis, s_basis, spec_d, spec_s, center, mode)


def _check(h: Tensor, u: Tensor, mode: str) -> None:
    if h.ndim != 2 or h.shape != u.shape:
        raise InputError(
            f"states and prediction directions must both be [n, d], got {tuple(h.shape)} and {tuple(u.shape)}"
        )
    if h.shape[0] == 0:
        raise InputError("an empty set of states")
    if mode not in ("exact", "faithful"):
        raise InputError(f"mode must be 'exact' or 'faithful', got {mode!r}")


def own_bases(u: Tensor, basis: PDSFBasis) -> tuple[Tensor, Tensor]:
    """Per state: D with its ``u`` projected out, and S with ``u`` and that D projected out
    (orthonormal columns, ``[n, d, k]``)."""
    u = _unit(u.to(basis.D.dtype))
    d_own = basis.D[None] - u[:, :, None] * (u @ basis.D)[:, None, :]
    d_own, _ = torch.linalg.qr(d_own)
    s_own = basis.S[None] - u[:, :, None] * (u @ basis.S)[:, None, :]
    s_own = s_own - d_own @ (d_own.transpose(1, 2) @ s_own)
    s_own, _ = torch.linalg.qr(s_own)
    return d_own, s_own


def split_pdsf(
    h: Float[Tensor, "n d"], u: Float[Tensor, "n d"], basis: PDSFBasis, mode: str | None = None
) -> dict[str, Float[Tensor, "n d"]]:
    """``{"P", "D", "S", "F"}`` parts of each state (sum: ``h``); ``mode`` defaults to the basis's."""
    mode = basis.mode if mode is None else mode
    _check(h, u, mode)
    dt = compute_dtype(h, u, basis.D)
    h, u = h.to(dt), _unit(u.to(dt))
    p = (h * u).sum(-1, keepdim=True) * u
    r = h - p
    if mode == "exact":
        d_own, s_own = own_bases(
            u, PDSFBasis(basis.D.to(dt), basis.S.to(dt), basis.spectrum_D, basis.spectrum_S, basis.center, mode)
        )
        dpart = (d_own @ (d_own.transpose(1, 2) @ r[:, :, None]))[:, :, 0]
        spart = (s_own @ (s_own.transpose(1, 2) @ r[:, :, None]))[:, :, 0]
    else:
        bd, bs = basis.D.to(dt), basis.S.to(dt)
        dpart = (r @ bd) @ bd.T
        spart = ((r - dpart) @ bs) @ bs.T
    return {"P": p, "D": dpart, "S": spart, "F": r - dpart - spart}


def energy_shares(parts: dict[str, Tensor]) -> dict[str, Float[Tensor, "n"]]:
    """``||part||² / ||h||²`` per state (0 for a zero state); they sum to 1 when the parts are orthogonal."""
    h = sum(parts.values())
    total = (h * h).sum(-1)
    return {
        name: torch.where(
            total > 0, (t * t).sum(-1) / total.clamp_min(torch.finfo(total.dtype).tiny), torch.zeros_like(total)
        )
        for name, t in parts.items()
    }


RELATIVE_VARIANCE_FLOOR = 1e-12  # a part's variance below this share of the states' mean energy is rounding


def subspace_participation(coords: Float[Tensor, "n k"], center: bool = True, scale: float | None = None) -> float:
    """Participation ratio of the variance of the states' coordinates inside a subspace. ``scale``: the states'
    mean squared norm; variance directions below :data:`RELATIVE_VARIANCE_FLOOR` of it count as none (a part
    whose energy is at rounding level has PR 0, not 0 or 1 by the rounding of one device or another)."""
    if coords.shape[0] < 2 or coords.shape[1] == 0:
        return 0.0
    c = coords.to(compute_dtype(coords))
    if center:
        c = c - c.mean(0)
    spectrum = torch.linalg.svdvals(c) ** 2  # sums over the n states
    if scale is not None:
        spectrum = torch.where(
            spectrum > RELATIVE_VARIANCE_FLOOR * scale * c.shape[0], spectrum, torch.zeros_like(spectrum)
        )
    return float(participation_ratio(spectrum))


def axis_angles(u: Float[Tensor, "n d"], axes: Float[Tensor, "d k"]) -> Float[Tensor, "n k"]:
    """Angle (degrees, 0–90) between each state's prediction direction and each principal axis."""
    cos = (u.to(axes.dtype) @ axes).abs() / u.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(axes.dtype).tiny)
    return torch.rad2deg(torch.arccos(cos.clamp(0, 1)))
