"""Parallel/perpendicular decomposition of an update relative to a reference.

Pure tensor functions; they know nothing about models. For an update ``y`` and a
reference ``r`` (both ``[..., d]``)::

    alpha  = <y, r> / max(||r||^2, eps)
    y_par  = alpha * r
    y_perp = y - y_par

Every function computes in float32 (float64 when an input is float64), whatever
the input dtype. Decompositions and edits are cast back to the dtype of ``y``;
statistics (ratios, cosines) stay in the compute dtype.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Union

import torch
from jaxtyping import Float
from torch import Tensor

from ..errors import InputError

__all__ = [
    "EPS",
    "Split",
    "Scale",
    "check_scale",
    "compute_dtype",
    "split_parallel",
    "scaled_delta",
    "is_unit",
    "scale_components",
    "parallel_ratio",
    "norm_ratio",
    "cosine",
]

EPS = 1e-6  # clamp on ||r||^2, as in the reference implementation

Scale = Union[float, Tensor]


class Split(NamedTuple):
    """``y = par + perp`` with ``par = alpha * r`` and ``perp`` orthogonal to ``r``."""

    par: Float[Tensor, "... d"]
    perp: Float[Tensor, "... d"]
    alpha: Float[Tensor, "..."]


def compute_dtype(*tensors: Tensor) -> torch.dtype:
    """float64 if any input is float64, else float32."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def check_scale(s: Scale, name: str = "scale") -> Scale:
    """Return ``s`` if it is finite (a number or a tensor), else raise ``ValueError``."""
    if isinstance(s, Tensor):
        if not torch.isfinite(s).all():
            raise InputError(f"{name} must be finite, got a tensor with non-finite entries")
        return s
    if not isinstance(s, numbers.Real):
        raise InputError(f"{name} must be a number, got {s!r}")
    try:
        value = float(s)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number, got {s!r}") from None
    if not math.isfinite(value):
        raise InputError(f"{name} must be finite, got {s!r}")
    return value


def _pow2(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per vector (``[..., 1]``, no gradient), a power of two ``s >= 1`` above ``max |x|`` (1 for vectors below
    1) and ``1 / s``: ``x / s`` has entries below 1, so its squared norm cannot overflow, and a power of two
    scales without rounding."""
    _, e = torch.frexp(x.detach().abs().amax(-1, keepdim=True))
    one = torch.ones(e.shape, dtype=x.dtype, device=x.device)
    e = e.clamp_min(0)
    return torch.ldexp(one, e), torch.ldexp(one, -e)


def _alpha(y: Tensor, r: Tensor, eps: float) -> Tensor:
    """``<y, r> / max(||r||^2, eps)`` over the last axis, in y's and r's (compute) dtype.

    Computed on ``r`` scaled by a power of two (:func:`_pow2`): the same bits as without it wherever
    ``||r||^2`` is representable, and finite where it would overflow (``||r|| > 1.8e19`` in float32)."""
    s, inv = _pow2(r)
    rs = r * inv
    sq = (rs * rs).sum(-1)
    denom = torch.maximum(sq, eps * (inv * inv).squeeze(-1))
    return (y * rs).sum(-1) / denom * inv.squeeze(-1)


def _norm(x: Tensor) -> Tensor:
    """``||x||`` over the last axis without overflow in the squares (:func:`_pow2`)."""
    s, inv = _pow2(x)
    return (x * inv).norm(dim=-1) * s.squeeze(-1)


def split_parallel(y: Float[Tensor, "... d"], ref: Float[Tensor, "... d"], eps: float = EPS) -> Split:
    """Split ``y`` into its component along ``ref`` and the rest.

    ``ref`` broadcasts against ``y``. A zero (or tiny) reference gives
    ``alpha = 0``, ``par = 0`` and ``perp = y`` (never NaN).
    """
    dt = compute_dtype(y, ref)
    yc, rc = y.to(dt), ref.to(dt)
    alpha = _alpha(yc, rc, eps)
    par = alpha.unsqueeze(-1) * rc
    perp = yc - par
    return Split(par.to(y.dtype), perp.to(y.dtype), alpha.to(y.dtype))


def _as_component_scale(s: Scale, like: Tensor) -> Scale:
    """A tensor scale broadcastable to ``[...]`` (one per vector) becomes ``[..., 1]``."""
    if isinstance(s, Tensor):
        s = s.to(like.dtype)
        if s.dim() > 0:
            s = s.unsqueeze(-1)
    return s


def scaled_delta(
    y: Float[Tensor, "... d"],
    ref: Float[Tensor, "... d"],
    s_par: Scale = 1.0,
    s_perp: Scale = 1.0,
    eps: float = EPS,
) -> Float[Tensor, "... d"]:
    """``y_hat - y = (s_perp - 1) y + (s_par - s_perp) y_par``, in the compute dtype.

    The edit written as a change: adding it to any tensor that contains ``y``
    replaces ``y`` by ``y_hat`` and keeps the rest. With ``s_perp = 1`` this is
    one rescaled copy of ``ref`` per vector, ``(s_par - 1) alpha ref``.
    """
    dt = compute_dtype(y, ref)
    yc, rc = y.to(dt), ref.to(dt)
    alpha = _alpha(yc, rc, eps).unsqueeze(-1)
    sp, sq = _as_component_scale(s_par, yc), _as_component_scale(s_perp, yc)
    if is_unit(sq):
        return ((sp - 1.0) * alpha) * rc
    return (sq - 1.0) * yc + ((sp - sq) * alpha) * rc


def scale_components(
    y: Float[Tensor, "... d"],
    ref: Float[Tensor, "... d"],
    s_par: Scale = 1.0,
    s_perp: Scale = 1.0,
    eps: float = EPS,
) -> Float[Tensor, "... d"]:
    """``s_par * y_par + s_perp * y_perp``, computed as ``y + scaled_delta(...)``.

    The no-op ``(1, 1)`` returns ``y`` itself, bit for bit. Scales are real
    numbers or tensors broadcastable to ``y.shape[:-1]`` (one scale per vector,
    e.g. a learned gate; ``[batch, pos, 1]`` for one scale per token shared by
    all heads of ``[batch, pos, head, d_head]``) and must be finite.
    Differentiable.
    """
    s_par, s_perp = check_scale(s_par, "s_par"), check_scale(s_perp, "s_perp")
    if is_unit(s_par) and is_unit(s_perp):
        return y
    dt = compute_dtype(y, ref)
    return (y.to(dt) + scaled_delta(y, ref, s_par, s_perp, eps)).to(y.dtype)


def is_unit(s: Scale) -> bool:
    """Whether ``s`` is the number 1 (a tensor never counts: it may be a learned gate)."""
    return not isinstance(s, Tensor) and s == 1.0


def parallel_ratio(y: Float[Tensor, "... d"], ref: Float[Tensor, "... d"], eps: float = EPS) -> Float[Tensor, "..."]:
    """``|alpha| * ||ref|| / ||y_perp||`` (equal to ``||y_par|| / ||y_perp||``), float32/64.

    Greater than 1 means the update is mostly a rescaling of ``ref``. The
    denominator is clamped at ``sqrt(eps)``, so an exactly parallel update gives a
    large finite number and a zero update gives 0.
    """
    dt = compute_dtype(y, ref)
    yc, rc = y.to(dt), ref.to(dt)
    alpha = _alpha(yc, rc, eps)
    perp = yc - alpha.unsqueeze(-1) * rc
    return alpha.abs() * _norm(rc) / _norm(perp).clamp_min(math.sqrt(eps))


def norm_ratio(y: Float[Tensor, "... d"], ref: Float[Tensor, "... d"], eps: float = EPS) -> Float[Tensor, "..."]:
    """``||y|| / ||ref||``: size of the update relative to the state it updates.

    ``||ref||`` is clamped at ``sqrt(eps)`` (as ``alpha`` clamps ``||ref||^2``)."""
    dt = compute_dtype(y, ref)
    return _norm(y.to(dt)) / _norm(ref.to(dt)).clamp_min(math.sqrt(eps))


def cosine(y: Float[Tensor, "... d"], ref: Float[Tensor, "... d"], eps: float = EPS) -> Float[Tensor, "..."]:
    """Cosine of the angle between ``y`` and ``ref`` (0 when either is zero)."""
    dt = compute_dtype(y, ref)
    yc, rc = y.to(dt), ref.to(dt)
    ys, rs = yc * _pow2(yc)[1], rc * _pow2(rc)[1]  # a cosine is scale-free
    denom = ys.norm(dim=-1) * rs.norm(dim=-1)
    cos = (ys * rs).sum(-1) / denom.clamp_min(torch.finfo(dt).tiny)
    return torch.where(denom > 0, cos, torch.zeros_like(cos))
