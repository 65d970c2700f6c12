"""Attention value space: the token's own "self message" and the rest.

For query ``t`` and head ``h`` with attention pattern ``A`` and values ``v``,
the aggregate is ``o_t = sum_s A_ts v_s`` (``attn.hook_z``). It splits into the
self message ``d_t = A_tt v_t`` and the non-self aggregate ``c_t = o_t - d_t``.

Grouped-query attention: query head ``h`` reads KV head ``h // (n_heads / n_kv)``.
Pure tensor functions; shapes follow TransformerLens (``hook_v``:
``[batch, pos, kv_head, d_head]``, ``hook_pattern``: ``[batch, head, q, k]``).
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from ..errors import InputError

__all__ = [
    "pattern_entropy",
    "kv_head_index",
    "expand_kv",
    "group_heads",
    "self_weights",
    "self_message",
    "split_self",
    "scale_diagonal",
    "remove_diagonal",
]


def kv_head_index(n_heads: int, n_kv_heads: int | None = None) -> torch.LongTensor:
    """``[n_heads]``: the KV head that each query head reads."""
    n_kv = n_heads if n_kv_heads is None else n_kv_heads
    if n_kv < 1 or n_heads % n_kv:
        raise InputError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv}")
    return torch.arange(n_heads) // (n_heads // n_kv)


def expand_kv(v: Float[Tensor, "batch pos kv d_head"], n_heads: int) -> Float[Tensor, "batch pos head d_head"]:
    """Repeat each KV head for the query heads that share it (GQA); a view-free no-op if equal."""
    n_kv = v.shape[-2]
    if n_kv == n_heads:
        return v
    if n_heads % n_kv:
        raise InputError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv}")
    return v.repeat_interleave(n_heads // n_kv, dim=-2)


def group_heads(x: Float[Tensor, "batch pos head d"], n_kv: int) -> Float[Tensor, "batch pos kv group d"]:
    """View query heads grouped by the KV head they read (no copy when possible).

    Query head ``h`` lands at ``[kv, g]`` with ``h = kv * group + g``, matching
    :func:`kv_head_index`; a KV tensor ``[batch, pos, kv, d]`` lines up with
    this as ``v[..., None, :]``.
    """
    *lead, n_heads, d = x.shape
    if n_heads % n_kv:
        raise InputError(f"n_heads={n_heads} is not a multiple of n_kv_heads={n_kv}")
    return x.reshape(*lead, n_kv, n_heads // n_kv, d)


def self_weights(pattern: Float[Tensor, "batch head q k"]) -> Float[Tensor, "batch q head"]:
    """``A_tt``: each query's weight on its own key.

    With a KV cache the ``q`` queries are the last ``q`` of the ``k`` keys, so
    query ``i`` sits at key ``i + k - q``.
    """
    q, k = pattern.shape[-2], pattern.shape[-1]
    diag = torch.diagonal(pattern, offset=k - q, dim1=-2, dim2=-1)  # [batch, head, q]
    return diag.transpose(-1, -2)


def self_message(
    pattern: Float[Tensor, "batch head q k"], v: Float[Tensor, "batch k kv d_head"]
) -> Float[Tensor, "batch q head d_head"]:
    """``d_t = A_tt v_t`` for every head (``v`` with KV heads, expanded for GQA)."""
    n_heads, q = pattern.shape[1], pattern.shape[-2]
    v_self = expand_kv(v[:, v.shape[1] - q :], n_heads)
    return self_weights(pattern).unsqueeze(-1).to(v_self.dtype) * v_self


def split_self(
    z: Float[Tensor, "batch q head d_head"],
    pattern: Float[Tensor, "batch head q k"],
    v: Float[Tensor, "batch k kv d_head"],
) -> tuple[Float[Tensor, "batch q head d_head"], Float[Tensor, "batch q head d_head"]]:
    """``(d, c)`` with ``d = A_tt v_t`` the self message and ``c = z - d``."""
    d = self_message(pattern, v)
    return d, z - d


def scale_diagonal(
    pattern: Float[Tensor, "batch head q k"],
    scale: float | Tensor,
    keep_first: bool = True,
    eps: float = 1e-12,
) -> Float[Tensor, "batch head q k"]:
    """Scale ``A_tt`` by ``scale`` and rescale the other keys so each row keeps its sum.

    ``A'_tt = scale * A_tt`` and ``A'_ts = A_ts (1 - A'_tt) / (1 - A_tt)`` for
    ``s != t`` (using the row's own sum in place of 1). ``scale = 0`` is diagonal
    removal. Row 0 (the first position, which sees only itself) is kept when
    ``keep_first``; so is a row with no mass off the diagonal (below ``eps``),
    which cannot be renormalised. Computed in float32/64, cast back.
    """
    q, k = pattern.shape[-2], pattern.shape[-1]
    dt = torch.float64 if pattern.dtype == torch.float64 else torch.float32
    p = pattern.to(dt)
    diag = torch.diagonal(p, offset=k - q, dim1=-2, dim2=-1).unsqueeze(-1)  # [batch, head, q, 1]
    # off-diagonal mass as (row sum - diagonal), both in float64: exact enough even
    # when nearly all the mass is on the diagonal, and two passes over the pattern
    # (this sum and the rescale below) instead of a masked copy per step
    mass = (p.sum(-1, keepdim=True, dtype=torch.float64) - diag.double()).clamp_min(0.0)
    if isinstance(scale, Tensor):
        scale = scale.to(dt)
    new_diag = scale * diag
    factor = ((mass + diag - new_diag) / mass.clamp_min(eps)).to(dt)
    ok = mass > eps
    if keep_first:
        self_key = torch.arange(q, device=p.device) + (k - q)  # [q]: key index of each query
        ok = ok & (self_key != 0)[:, None]
    out = p * torch.where(ok, factor, 1.0)
    torch.diagonal(out, offset=k - q, dim1=-2, dim2=-1).copy_(torch.where(ok, new_diag, diag).squeeze(-1))
    return out.to(pattern.dtype)


def remove_diagonal(
    pattern: Float[Tensor, "batch head q k"], keep_first: bool = True
) -> Float[Tensor, "batch head q k"]:
    """Set ``A_tt = 0`` and renormalise each row over the other keys (row 0 kept)."""
    return scale_diagonal(pattern, 0.0, keep_first)


def pattern_entropy(pattern: Float[Tensor, "batch head q k"]) -> Float[Tensor, "batch head q"]:
    """Entropy ``-sum_k A log A`` (nats) of each query's attention row, ``0 log 0 = 0``; float32
    (float64 for float64 input)."""
    a = pattern.to(torch.float64 if pattern.dtype == torch.float64 else torch.float32)
    return -torch.where(a > 0, a * torch.log(a.clamp_min(torch.finfo(a.dtype).tiny)), torch.zeros_like(a)).sum(-1)
