"""What a head does, read from its attention pattern and its OV circuit (Olsson et al. 2022, "In-context
learning and induction heads"): on a sequence whose second half repeats its first, a previous-token head
attends from each token to the one before it, an induction head from a token of the second half to the token
after that token's earlier occurrence, a duplicate-token head to that earlier occurrence itself, and a copying
head's OV circuit raises the logit of the token it attends to (its eigenvalues are mostly positive).

Pure tensor functions: patterns ``[batch, heads, query, key]`` in, one score per head out (float32, or
float64 for float64 input).
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from .parallel import compute_dtype
from ..errors import InputError

__all__ = ["previous_token_score", "induction_score", "duplicate_token_score", "attention_to", "copying_score"]


def _check(pattern: Tensor) -> Tensor:
    if pattern.ndim != 4 or pattern.shape[-1] != pattern.shape[-2]:
        raise InputError(
            f"a pattern must be [batch, heads, query, key] with query = key positions, got {tuple(pattern.shape)}"
        )
    return pattern.to(compute_dtype(pattern))


def previous_token_score(pattern: Float[Tensor, "b h q k"], start: int = 1) -> Float[Tensor, "h"]:
    """Mean attention from each position ``q >= max(start, 1)`` to ``q - 1`` (``start``: the first query
    counted, e.g. 2 to leave out the token right after BOS, whose previous token is BOS)."""
    p = _check(pattern)
    if max(start, 1) >= p.shape[-1]:
        raise InputError(f"no query position from {start} in a pattern of {p.shape[-1]} positions")
    q = torch.arange(max(start, 1), p.shape[-1], device=p.device)
    return p[:, :, q, q - 1].mean((0, 2))


def _to_earlier(pattern: Tensor, period: int, offset: int, back: int, shortest: int) -> Tensor:
    """Mean attention from each position ``q`` of the repeat (from ``offset + period``) to ``q - back``."""
    p = _check(pattern)
    if period < shortest:
        raise InputError(f"period must be at least {shortest} token{'s' if shortest > 1 else ''}, got {period}")
    if offset + period >= p.shape[-1]:
        raise InputError(f"no repeated position: {p.shape[-1]} positions, the repeat starts at {offset + period}")
    q = torch.arange(offset + period, p.shape[-1], device=p.device)
    return p[:, :, q, q - back].mean((0, 2))


def induction_score(pattern: Float[Tensor, "b h q k"], period: int, offset: int = 0) -> Float[Tensor, "h"]:
    """Mean attention from each position ``q`` of the repeat to ``q - period + 1``, the token after the
    earlier occurrence of ``q``'s token, on sequences whose tokens ``offset + period ..`` repeat those from
    ``offset`` (e.g. ``offset=1`` after a BOS)."""
    return _to_earlier(pattern, period, offset, back=period - 1, shortest=2)


def duplicate_token_score(pattern: Float[Tensor, "b h q k"], period: int, offset: int = 0) -> Float[Tensor, "h"]:
    """Mean attention from each position ``q`` of the repeat to ``q - period``, the earlier occurrence of ``q``'s own
    token, on the sequences of :func:`induction_score` (a head that finds where the current token was before)."""
    return _to_earlier(pattern, period, offset, back=period, shortest=1)


def attention_to(pattern: Float[Tensor, "b h q k"], query: Tensor, key: Tensor) -> Float[Tensor, "h"]:
    """Mean attention of each head from position ``query[b]`` to ``key[b]`` of each sequence (``[b]`` ints): a
    score of a head's job where the positions differ per sequence (e.g. a query token's earlier occurrence)."""
    p = _check(pattern)
    query, key = torch.as_tensor(query, device=p.device), torch.as_tensor(key, device=p.device)
    if query.shape != (p.shape[0],) or key.shape != (p.shape[0],):
        raise InputError(
            f"query and key must be one position per sequence ({p.shape[0]}), got "
            f"{tuple(query.shape)} and {tuple(key.shape)}"
        )
    rows = torch.arange(p.shape[0], device=p.device)
    return p[rows, :, query, key].mean(0)


def copying_score(
    w_e: Float[Tensor, "vocab d"], w_ov: Float[Tensor, "h d d"], w_u: Float[Tensor, "d vocab"]
) -> Float[Tensor, "h"]:
    """Olsson et al.'s copying score of each head: ``Σ Re(λ) / Σ |λ|`` over the eigenvalues ``λ`` of its
    full OV circuit ``W_E W_OV W_U`` (``[vocab, vocab]``, eigenvalues of the equal-spectrum ``[d, d]``
    matrix ``W_OV W_U W_E``), in ``[-1, 1]``: near 1, attending to a token raises that token's logit."""
    d = w_ov.shape[-1]
    if w_ov.ndim != 3 or w_ov.shape[1] != d or w_e.shape[1] != d or w_u.shape[0] != d:
        raise InputError(
            f"shapes do not chain: W_E {tuple(w_e.shape)}, W_OV {tuple(w_ov.shape)}, W_U {tuple(w_u.shape)}"
        )
    dt = torch.float64
    circuit = w_ov.to(dt) @ (w_u.to(dt) @ w_e.to(dt))  # [h, d, d]: the nonzero spectrum of W_E W_OV W_U
    lam = torch.linalg.eigvals(circuit)
    total = lam.abs().sum(-1)
    out = torch.where(total > 0, lam.real.sum(-1) / total.clamp_min(torch.finfo(dt).tiny), torch.zeros_like(total))
    return out.to(compute_dtype(w_ov))
