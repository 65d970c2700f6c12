"""The parts of an activation that a patch copies from one run into another.

Pure tensor functions. A patch replaces part of a *target* activation (the run being
patched) by the same part of a *source* activation (the run patched from). Written as a
change added to the target, ``d = source - target``:

    whole:  d
    par:    P_r d          (P_r: projection onto the reference r)
    perp:   d - P_r d

so ``par + perp = whole`` exactly, whatever the reference, and a ``par`` patch leaves the
target's component orthogonal to ``r`` untouched. Which run's reference ``r`` is used (the
patched run's, by default) is the caller's choice.

In value space (one attention head, query ``t``), a head's output ``z_t`` splits into its
self message ``A_tt v_t`` and the non-self aggregate ``c_t = z_t - A_tt v_t``
(:func:`value_parts`); ``c_t`` splits again along ``v_t``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from jaxtyping import Float
from torch import Tensor

from .parallel import EPS, compute_dtype
from .value_space import expand_kv, self_weights
from ..errors import InputError

__all__ = ["PARTS", "project_part", "part_delta", "ValueParts", "value_parts", "head_writes"]

PARTS = ("whole", "par", "perp")


def project_part(
    d: Float[Tensor, "... d"], ref: Float[Tensor, "... d"] | None, part: str, eps: float = EPS
) -> Float[Tensor, "... d"]:
    """``part`` of the change ``d`` relative to ``ref`` (broadcast; unused for ``whole``), in the
    compute dtype. A zero reference has no parallel part (``par`` gives 0, ``perp`` all of ``d``)."""
    if part not in PARTS:
        raise InputError(f"unknown part {part!r}; choose from {PARTS}")
    dt = compute_dtype(d, *(() if ref is None else (ref,)))
    d = d.to(dt)
    if part == "whole":
        return d
    if ref is None:
        raise InputError(f"part {part!r} needs a reference")
    r = ref.to(dt)
    par = ((d * r).sum(-1) / (r * r).sum(-1).clamp_min(eps)).unsqueeze(-1) * r
    return par if part == "par" else d - par


def part_delta(
    source: Float[Tensor, "... d"],
    target: Float[Tensor, "... d"],
    ref: Float[Tensor, "... d"] | None,
    part: str,
    eps: float = EPS,
) -> Float[Tensor, "... d"]:
    """The change that copies ``part`` of ``source`` into ``target``: ``project_part(source - target, ref, part)``."""
    dt = compute_dtype(source, target)
    return project_part(source.to(dt) - target.to(dt), ref, part, eps)


class ValueParts(NamedTuple):
    """A head output split in value space, per query head: ``z = self_msg + nonself``."""

    self_msg: Float[Tensor, "batch q head d_head"]
    nonself: Float[Tensor, "batch q head d_head"]
    v: Float[Tensor, "batch q head d_head"]  # the query token's own value (the reference of nonself)


def value_parts(
    z: Float[Tensor, "batch q head d_head"],
    v: Float[Tensor, "batch k kv d_head"],
    pattern: Float[Tensor, "batch head q k"],
) -> ValueParts:
    """``A_tt v_t``, ``c_t = z_t - A_tt v_t`` and ``v_t`` (GQA values expanded), in the compute dtype."""
    dt = compute_dtype(z, v, pattern)
    q, n_heads = z.shape[1], z.shape[2]
    v_self = expand_kv(v[:, v.shape[1] - q :], n_heads).to(dt)
    self_msg = self_weights(pattern).to(dt).unsqueeze(-1) * v_self
    return ValueParts(self_msg, z.to(dt) - self_msg, v_self)


def head_writes(
    z: Float[Tensor, "batch q head d_head"], W_O: Float[Tensor, "head d_head d_model"]
) -> Float[Tensor, "batch q head d_model"]:
    """What each head adds to the attention output, ``z^h W_O^h`` (no bias), in the compute dtype."""
    dt = compute_dtype(z, W_O)
    return torch.einsum("bqhd,hdm->bqhm", z.to(dt), W_O.to(dt))
