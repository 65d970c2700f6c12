"""How a layer's update splits into a tokenwise part and a residual (torch only).

For token states ``h_in = h_l``, ``h_out = h_{l+1}`` and a tokenwise
approximation ``t_out = T(h_l)``: the full update ``Delta_full = h_out - h_in``,
the tokenwise update ``Delta_tok = t_out - h_in`` and the residual
``r = h_out - t_out = Delta_full - Delta_tok``. :func:`update_geometry` gives per
token the cosine between the two updates, the angle of ``r`` to ``Delta_tok``,
the relative error ``||r|| / ||Delta_full||`` and the share of ``r``'s energy in
the dominant subspace of ``Delta_tok`` (its top right singular vectors over the
pool, as many as reach ``energy`` of the total; :func:`dominant_basis`).
Zero vectors give a cosine of 0 and an angle of 90°, never NaN.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from .parallel import compute_dtype, cosine
from ..errors import InputError

__all__ = ["UpdateGeometry", "dominant_basis", "update_geometry"]


class UpdateGeometry(NamedTuple):
    """Per-token measurements, float32/64 ``[n]``, and the dominant subspace's rank."""

    cos_update: Tensor  # cos(Delta_full, Delta_tok)
    residual_angle: Tensor  # degrees between r and Delta_tok
    rel_error: Tensor  # ||r|| / ||Delta_full||
    residual_energy: Tensor  # ||P r||² / ||r||², P onto the dominant subspace of Delta_tok
    rank: int


def dominant_basis(delta: Float[Tensor, "n d"], energy: float = 0.9) -> Float[Tensor, "d r"]:
    """Orthonormal basis of the top right singular vectors of ``delta`` holding ``energy`` of its
    squared Frobenius norm (at least one vector)."""
    if not 0 < energy <= 1:
        raise InputError(f"energy must be in (0, 1], got {energy}")
    dt = compute_dtype(delta)
    _, s, vh = torch.linalg.svd(delta.to(dt), full_matrices=False)
    share = torch.cumsum(s**2, 0) / (s**2).sum().clamp_min(torch.finfo(dt).tiny)
    r = int((share < energy - 1e-12).sum()) + 1
    return vh[: min(r, vh.shape[0])].T


def update_geometry(
    h_in: Float[Tensor, "n d"],
    h_out: Float[Tensor, "n d"],
    t_out: Float[Tensor, "n d"],
    *,
    basis: Float[Tensor, "d r"] | None = None,
    energy: float = 0.9,
) -> UpdateGeometry:
    """Per-token geometry of ``Delta_full`` vs ``Delta_tok`` and of the residual (see the module)."""
    if not (h_in.shape == h_out.shape == t_out.shape) or h_in.ndim != 2:
        raise InputError(
            f"h_in, h_out, t_out must all be [n, d]; got {tuple(h_in.shape)}, "
            f"{tuple(h_out.shape)}, {tuple(t_out.shape)}"
        )
    dt = compute_dtype(h_in, h_out, t_out)
    h_in, h_out, t_out = h_in.to(dt), h_out.to(dt), t_out.to(dt)
    full, tok = h_out - h_in, t_out - h_in
    r = h_out - t_out
    basis = dominant_basis(tok, energy) if basis is None else basis.to(dt)
    tiny = torch.finfo(dt).tiny
    r2 = (r * r).sum(-1)
    inside = ((r @ basis) ** 2).sum(-1)
    return UpdateGeometry(
        cos_update=cosine(full, tok),
        residual_angle=torch.rad2deg(torch.arccos(cosine(r, tok).clamp(-1, 1))),
        rel_error=r.norm(dim=-1) / full.norm(dim=-1).clamp_min(tiny),
        residual_energy=torch.where(r2 > 0, inside / r2.clamp_min(tiny), torch.zeros_like(r2)),
        rank=int(basis.shape[1]),
    )
