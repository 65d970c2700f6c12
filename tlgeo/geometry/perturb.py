"""L2-matched perturbations of token states: change the magnitude or the direction by ``delta``.

Pure tensor functions; they know nothing about models. For token states ``h``
(``[..., d]``, one vector per token) and a displacement ``delta`` (a number, or
a tensor broadcasting against ``h[..., 0]`` for a per-token ``delta``):

* :func:`magnitude_perturb`: ``h' = (1 + s delta / ||h||) h`` with a sign
  ``s = ±1`` per token: ``||h' - h|| = delta`` exactly, the direction is kept.
  When ``delta > ||h||`` a shrink (``s = -1``) flips ``h`` through the origin;
  the reference notebook lets it happen (``flip="allow"``), ``flip="clip"``
  stops the shrink at 0 (displacement ``||h||``), ``flip="grow"`` grows those
  tokens instead (displacement still ``delta``).
* :func:`rotate_exact`: each token turned by ``theta = 2 asin(delta / (2 ||h||))``
  in the plane of ``h`` and a random direction orthogonalised against it:
  ``||h'|| = ||h||`` and ``||h' - h|| = delta`` exactly; where
  ``delta > 2 ||h||`` no rotation reaches it and ``theta`` is clipped to pi.
* :func:`rotate_faithful`: the reference notebook's angle perturbation:
  ``h' = ||h|| normalize(h_hat + m n)`` with ``n`` a unit Gaussian direction
  *not* orthogonalised against ``h``, and one ``m`` per tensor found by 20
  bisection steps on ``[0, 2]`` so that the **mean** displacement over all its
  tokens equals ``delta`` (single tokens move by more or less than ``delta``).

Each returns the new states (in the dtype of ``h``) and a boolean ``[...]``
mask of the tokens that could not be moved as asked (clipped). The arithmetic
is float32 (float64 for float64 input); ``delta = 0`` returns ``h`` itself; a
zero-norm token has no direction to keep or turn: it is left as it is and
reported as clipped.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple, Union

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from .parallel import compute_dtype
from ..errors import InputError

__all__ = [
    "Perturbed",
    "FLIPS",
    "check_delta",
    "random_signs",
    "random_directions",
    "magnitude_perturb",
    "rotate_exact",
    "rotate_faithful",
    "displacement",
]

Delta = Union[float, Tensor]
FLIPS = ("allow", "clip", "grow")
_TINY = 1e-12  # below this norm a token has no direction


class Perturbed(NamedTuple):
    """Perturbed states and the tokens that could not be moved as asked."""

    h: Float[Tensor, "... d"]
    clipped: Bool[Tensor, "..."]


def check_delta(delta: Delta) -> Delta:
    """``delta`` if it is finite and >= 0 (a number or a tensor), else ``ValueError``."""
    if isinstance(delta, Tensor):
        if not torch.is_floating_point(delta) or not torch.isfinite(delta).all() or (delta < 0).any():
            raise InputError("delta must be finite and >= 0 (a float tensor)")
        return delta
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real) or not math.isfinite(delta) or delta < 0:
        raise InputError(f"delta must be a finite number >= 0, got {delta!r}")
    return float(delta)


def _is_zero(delta: Delta) -> bool:
    return not isinstance(delta, Tensor) and delta == 0.0


def _delta_like(delta: Delta, norms: Tensor) -> Tensor:
    """``delta`` as a ``[..., 1]`` tensor in the dtype of ``norms``."""
    if isinstance(delta, Tensor):
        return delta.to(norms.dtype).expand(norms.shape[:-1]).unsqueeze(-1)
    return torch.full_like(norms, float(delta))


def random_signs(shape: torch.Size | tuple[int, ...], generator: torch.Generator | None = None) -> Tensor:
    """``±1.0`` per entry of ``shape`` (float32), from ``generator``."""
    return torch.randint(0, 2, tuple(shape), generator=generator).float().mul_(2).sub_(1)


def random_directions(shape: torch.Size | tuple[int, ...], generator: torch.Generator | None = None) -> Tensor:
    """Unit Gaussian directions ``[..., d]`` (float32), from ``generator``."""
    n = torch.randn(tuple(shape), generator=generator)
    return n / n.norm(dim=-1, keepdim=True).clamp_min(_TINY)


def magnitude_perturb(
    h: Float[Tensor, "... d"], delta: Delta, signs: Float[Tensor, "..."], *, flip: str = "allow"
) -> Perturbed:
    """``h + s delta h_hat`` per token: the norm moves by ``delta``, the direction stays.

    ``signs``: ``±1`` per token (``[...]``); ``flip``: see the module docstring.
    """
    delta = check_delta(delta)
    if flip not in FLIPS:
        raise InputError(f"unknown flip {flip!r}; choose from {FLIPS}")
    if signs.shape != h.shape[:-1]:
        raise InputError(f"signs must be one per token {tuple(h.shape[:-1])}, got {tuple(signs.shape)}")
    if _is_zero(delta):
        return Perturbed(h, torch.zeros(h.shape[:-1], dtype=torch.bool, device=h.device))
    dt = compute_dtype(h)
    x = h.to(dt)
    norms = x.norm(dim=-1, keepdim=True)
    d = _delta_like(delta, norms)
    s = signs.to(dt).unsqueeze(-1)
    flips = (s < 0) & (d > norms)
    if flip == "grow":
        s = torch.where(flips, torch.ones_like(s), s)
    elif flip == "clip":
        d = torch.where(flips, norms, d)
    empty = norms <= _TINY
    step = torch.where(empty, torch.zeros_like(d), s * d / norms.clamp_min(_TINY))
    out = x + step * x
    clipped = (empty | (flips if flip != "allow" else torch.zeros_like(flips))).squeeze(-1)
    return Perturbed(out.to(h.dtype), clipped)


def rotate_exact(h: Float[Tensor, "... d"], delta: Delta, noise: Float[Tensor, "... d"]) -> Perturbed:
    """Turn each token towards ``noise`` (orthogonalised against it) by ``2 asin(delta / 2||h||)``.

    ``noise``: any direction per token (``[..., d]``; need not be unit or orthogonal).
    """
    delta = check_delta(delta)
    if noise.shape != h.shape:
        raise InputError(f"noise must have the shape of h {tuple(h.shape)}, got {tuple(noise.shape)}")
    if _is_zero(delta):
        return Perturbed(h, torch.zeros(h.shape[:-1], dtype=torch.bool, device=h.device))
    dt = compute_dtype(h, noise)
    x, n = h.to(dt), noise.to(dt)
    norms = x.norm(dim=-1, keepdim=True)
    x_hat = x / norms.clamp_min(_TINY)
    n_perp = n - (n * x_hat).sum(-1, keepdim=True) * x_hat
    n_norm = n_perp.norm(dim=-1, keepdim=True)
    u = n_perp / n_norm.clamp_min(_TINY)
    ratio = _delta_like(delta, norms) / (2 * norms.clamp_min(_TINY))
    clipped = (ratio > 1) | (norms <= _TINY) | (n_norm <= _TINY)
    theta = 2 * torch.asin(ratio.clamp(max=1.0))
    turned = norms * (torch.cos(theta) * x_hat + torch.sin(theta) * u)
    out = torch.where((norms <= _TINY) | (n_norm <= _TINY), x, turned)
    return Perturbed(out.to(h.dtype), clipped.squeeze(-1))


def rotate_faithful(
    h: Float[Tensor, "... d"], delta: float, noise: Float[Tensor, "... d"], *, steps: int = 20, high: float = 2.0
) -> tuple[Tensor, float]:
    """The reference notebook's angle perturbation; returns ``(h', m)``.

    ``h' = ||h|| normalize(h_hat + m noise)`` with one ``m`` for the whole tensor,
    bisected (``steps`` halvings of ``[0, high]``, the last midpoint kept) so that
    the mean over tokens of ``||h' - h||`` equals ``delta``. Norms are kept;
    single displacements are not ``delta``. The notebook's ``1e-8`` guards are kept.
    """
    delta = check_delta(delta)
    if isinstance(delta, Tensor):
        raise InputError("the faithful angle perturbation takes one delta per tensor (a number)")
    if noise.shape != h.shape:
        raise InputError(f"noise must have the shape of h {tuple(h.shape)}, got {tuple(noise.shape)}")
    if _is_zero(delta):
        return h, 0.0
    dt = compute_dtype(h, noise)
    x, n = h.to(dt), noise.to(dt)
    norms = x.norm(dim=-1, keepdim=True)
    x_hat = x / (norms + 1e-8)

    def turned(m: float) -> Tensor:
        v = x_hat + m * n
        return v / (v.norm(dim=-1, keepdim=True) + 1e-8) * norms

    low, hi, mid = 0.0, float(high), 0.0
    for _ in range(steps):
        mid = (low + hi) / 2
        if (x - turned(mid)).norm(dim=-1).mean().item() < delta:
            low = mid
        else:
            hi = mid
    return turned(mid).to(h.dtype), mid


def displacement(h: Float[Tensor, "... d"], h_new: Float[Tensor, "... d"]) -> Float[Tensor, "..."]:
    """``||h_new - h||`` per token, in the compute dtype."""
    dt = compute_dtype(h, h_new)
    return (h_new.to(dt) - h.to(dt)).norm(dim=-1)
