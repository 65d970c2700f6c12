"""Edits of a state's coordinates inside a subspace: rotate, attenuate, transplant, mix (torch only).

A subspace is an orthonormal basis ``B [d, k]`` (columns). Each edit changes only
``c = h B`` (the coordinates inside it) and leaves ``h - c Bᵀ`` untouched:

* :func:`rotate_in_subspace`: ``c -> c R`` for an orthogonal ``R [k, k]`` (norm kept);
* :func:`attenuate_in_subspace`: ``c -> a c``;
* :func:`replace_in_subspace`: ``c -> (1 - w) c + w c_other`` (``w = 1``: a transplant).

Rotations: :func:`haar_rotation` (Haar-uniform on SO(k), ``scipy.stats.special_ortho_group``) or
:func:`qr_rotation`, the authors' QR of a Gaussian matrix with no sign fix (not Haar-uniform).
"""

from __future__ import annotations

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from .parallel import compute_dtype

__all__ = ["haar_rotation", "qr_rotation", "rotation", "rotate_in_subspace", "attenuate_in_subspace",
           "replace_in_subspace", "random_basis"]


def haar_rotation(k: int, seed: int) -> Float[Tensor, "k k"]:
    """A Haar-uniform rotation of ``R^k`` (float64; the identity for ``k = 1``)."""
    if k < 1:
        raise ValueError(f"a rotation needs k >= 1, got {k}")
    if k == 1:
        return torch.ones(1, 1, dtype=torch.float64)
    from scipy.stats import special_ortho_group

    return torch.from_numpy(special_ortho_group.rvs(k, random_state=np.random.default_rng(seed)))


def qr_rotation(k: int, seed: int) -> Float[Tensor, "k k"]:
    """The authors' rotation: ``Q`` of the QR of a seeded Gaussian ``k x k`` matrix, no sign fix."""
    if k < 1:
        raise ValueError(f"a rotation needs k >= 1, got {k}")
    g = torch.randn(k, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    q, _ = torch.linalg.qr(g)
    return q


def rotation(k: int, seed: int, kind: str = "haar") -> Float[Tensor, "k k"]:
    """:func:`haar_rotation` (``kind="haar"``) or :func:`qr_rotation` (``"qr"``)."""
    if kind == "haar":
        return haar_rotation(k, seed)
    if kind == "qr":
        return qr_rotation(k, seed)
    raise ValueError(f"unknown rotation kind {kind!r}; choose haar or qr")


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
        raise ValueError(f"the basis must be [d={h.shape[-1]}, k], got shape {tuple(basis.shape)}")
    dt = compute_dtype(h, basis)
    b = basis.to(dt)
    return h.to(dt) @ b, b, dt


def rotate_in_subspace(h: Float[Tensor, "... d"], basis: Float[Tensor, "d k"],
                       rot: Float[Tensor, "k k"]) -> Float[Tensor, "... d"]:
    """``h`` with its coordinates inside ``basis`` rotated by ``rot`` (everything else unchanged)."""
    c, b, dt = _coords(h, basis)
    if rot.shape != (b.shape[1], b.shape[1]):
        raise ValueError(f"the rotation must be [{b.shape[1]}, {b.shape[1]}], got {tuple(rot.shape)}")
    return (h.to(dt) + (c @ rot.to(dt) - c) @ b.T).to(h.dtype)


def attenuate_in_subspace(h: Float[Tensor, "... d"], basis: Float[Tensor, "d k"], factor: float) -> Float[Tensor, "... d"]:
    """``h`` with its component inside ``basis`` scaled by ``factor``."""
    c, b, dt = _coords(h, basis)
    return (h.to(dt) + (factor - 1.0) * c @ b.T).to(h.dtype)


def replace_in_subspace(h: Float[Tensor, "... d"], basis: Float[Tensor, "d k"], other: Float[Tensor, "... d"],
                        weight: float = 1.0) -> Float[Tensor, "... d"]:
    """``h`` with its component inside ``basis`` moved towards ``other``'s: ``(1 - w) c + w c_other``."""
    c, b, dt = _coords(h, basis)
    c_other = other.to(dt) @ b
    return (h.to(dt) + weight * (c_other - c) @ b.T).to(h.dtype)
