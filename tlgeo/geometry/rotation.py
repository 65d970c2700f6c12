"""Edits of a state's coordinates inside a subspace: rotate, attenuate, transplant, mix (torch only).

A subspace is an orthonormal basis ``B [d, k]`` (columns). Each edit changes only
``c = h B`` (the coordinates inside it) and leaves ``h - c Bᵀ`` untouched:

* :func:`rotate_in_subspace`: ``c -> c R`` for an orthogonal ``R [k, k]`` (norm kept);
* :func:`attenuate_in_subspace`: ``c -> a c``;
* :func:`replace_in_subspace`: ``c -> (1 - w) c + w c_other`` (``w = 1``: a transplant).

Edits of the complement of several subspaces (F, outside P, D and S) act on
``f = h - Σ B_i B_iᵀ h`` (:func:`complement_part`): scale it, replace it by another state's
(rescaled to ``||f||``), or mix its coordinates by a :func:`signed_permutation` (the authors'
F-mix); the replaced or mixed vector is projected back onto the complement when asked.

Rotations: :func:`haar_rotation` (Haar-uniform on SO(k), ``scipy.stats.special_ortho_group``) or
:func:`qr_rotation`, the authors' QR of a Gaussian matrix with no sign fix (not Haar-uniform).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from .parallel import compute_dtype
from ..errors import InputError

__all__ = [
    "haar_rotation",
    "qr_rotation",
    "rotation",
    "rotate_in_subspace",
    "attenuate_in_subspace",
    "replace_in_subspace",
    "random_basis",
    "signed_permutation",
    "complement_part",
    "edit_complement",
]


def haar_rotation(k: int, seed: int) -> Float[Tensor, "k k"]:
    """A Haar-uniform rotation of ``R^k`` (float64; the identity for ``k = 1``)."""
    if k < 1:
        raise InputError(f"a rotation needs k >= 1, got {k}")
    if k == 1:
        return torch.ones(1, 1, dtype=torch.float64)
    from scipy.stats import special_ortho_group

    return torch.from_numpy(special_ortho_group.rvs(k, random_state=np.random.default_rng(seed)))


def qr_rotation(k: int, seed: int) -> Float[Tensor, "k k"]:
    """The authors' rotation: ``Q`` of the QR of a seeded Gaussian ``k x k`` matrix, no sign fix."""
    if k < 1:
        raise InputError(f"a rotation needs k >= 1, got {k}")
    g = torch.randn(k, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    q, _ = torch.linalg.qr(g)
    return q


def rotation(k: int, seed: int, kind: str = "haar") -> Float[Tensor, "k k"]:
    """:func:`haar_rotation` (``kind="haar"``) or :func:`qr_rotation` (``"qr"``)."""
    if kind == "haar":
        return haar_rotation(k, seed)
    if kind == "qr":
        return qr_rotation(k, seed)
    raise InputError(f"unknown rotation kind {kind!r}; choose haar or qr")


def random_basis(d: int, k: int, seed: int, avoid: Float[Tensor, "d m"] | None = None) -> Float[Tensor, "d k"]:
    """A uniformly random ``k``-dimensional subspace of ``R^d`` (orthonormal columns, float64),
    orthogonal to the columns of ``avoid`` when given."""
    g = torch.randn(d, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    if avoid is not None:
        a = avoid.to(torch.float64)
        g = g - a @ (a.T @ g)
    q, _ = torch.linalg.qr(g)
    return q


def _coords(h: Tensor, basis: Tensor) -> tuple[Tensor, Tensor, torch.dtype]:
    if basis.ndim != 2 or basis.shape[0] != h.shape[-1]:
        raise InputError(f"the basis must be [d={h.shape[-1]}, k], got shape {tuple(basis.shape)}")
    dt = compute_dtype(h, basis)
    b = basis.to(dt)
    return h.to(dt) @ b, b, dt


def rotate_in_subspace(
    h: Float[Tensor, "... d"], basis: Float[Tensor, "d k"], rot: Float[Tensor, "k k"]
) -> Float[Tensor, "... d"]:
    """``h`` with its coordinates inside ``basis`` rotated by ``rot`` (everything else unchanged)."""
    c, b, dt = _coords(h, basis)
    if rot.shape != (b.shape[1], b.shape[1]):
        raise InputError(f"the rotation must be [{b.shape[1]}, {b.shape[1]}], got {tuple(rot.shape)}")
    return (h.to(dt) + (c @ rot.to(dt) - c) @ b.T).to(h.dtype)


def attenuate_in_subspace(
    h: Float[Tensor, "... d"], basis: Float[Tensor, "d k"], factor: float
) -> Float[Tensor, "... d"]:
    """``h`` with its component inside ``basis`` scaled by ``factor``."""
    c, b, dt = _coords(h, basis)
    return (h.to(dt) + (factor - 1.0) * c @ b.T).to(h.dtype)


def replace_in_subspace(
    h: Float[Tensor, "... d"], basis: Float[Tensor, "d k"], other: Float[Tensor, "... d"], weight: float = 1.0
) -> Float[Tensor, "... d"]:
    """``h`` with its component inside ``basis`` moved towards ``other``'s: ``(1 - w) c + w c_other``."""
    c, b, dt = _coords(h, basis)
    c_other = other.to(dt) @ b
    return (h.to(dt) + weight * (c_other - c) @ b.T).to(h.dtype)


def signed_permutation(d: int, seed: int) -> tuple[Tensor, Tensor]:
    """``(perm [d], signs [d])``: a seeded permutation of the coordinates and random ±1 signs
    (``mixed = signs * f[perm]``), the authors' F-mix."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.permutation(d)), torch.from_numpy(rng.choice([-1.0, 1.0], size=d))


def complement_part(h: Float[Tensor, "b ... d"], bases: Sequence[Float[Tensor, "b d k"]]) -> Float[Tensor, "b ... d"]:
    """``h - Σ_i B_i B_iᵀ h`` per row ``b`` (the orthogonal complement of the subspaces when they are
    mutually orthogonal; the authors' F, ``h - P - D - S`` with each part projected separately,
    when they are not)."""
    out = h
    for b in bases:
        b = b.to(h.dtype)
        c = torch.einsum("b...d,bdk->b...k", h, b)
        out = out - torch.einsum("b...k,bdk->b...d", c, b)
    return out


def edit_complement(
    h: Float[Tensor, "b ... d"],
    bases: Sequence[Float[Tensor, "b d k"]],
    *,
    factor: float | None = None,
    donor: Float[Tensor, "b d"] | None = None,
    mix: tuple[Tensor, Tensor] | None = None,
    project: bool = True,
) -> Float[Tensor, "b ... d"]:
    """The change of ``h`` when its complement part ``f`` (:func:`complement_part`) becomes
    ``factor f``, or ``donor`` (row ``b``'s), or ``signs * f[perm]`` (``mix = (perm [b, d], signs [b, d])``);
    a donor or mixed vector is projected onto the complement (``project``) and rescaled to ``||f||``
    (zero where either is zero). Exactly zero for ``factor = 1``."""
    if sum(x is not None for x in (factor, donor, mix)) != 1:
        raise InputError("give exactly one of factor, donor or mix")
    f = complement_part(h, bases)
    if factor is not None:
        return (factor - 1.0) * f
    view = (slice(None),) + (None,) * (h.ndim - 2)
    if donor is not None:
        new = donor.to(h.dtype)[view].expand_as(f)
    else:
        perm, signs = mix
        idx = perm.to(h.device)[view].expand(f.shape)
        new = f.gather(-1, idx) * signs.to(device=h.device, dtype=h.dtype)[view]
    if project:
        new = complement_part(new, bases)
    tiny = torch.finfo(h.dtype).tiny
    norm_f, norm_new = f.norm(dim=-1, keepdim=True), new.norm(dim=-1, keepdim=True)
    new = torch.where(norm_new > 0, new * (norm_f / norm_new.clamp_min(tiny)), torch.zeros_like(new))
    return new - f
