"""Sentences as padded token batches, and each sentence's negative log-likelihood.

Shared by the evaluations that score whole sentences (BLiMP minimal pairs, the
sentence losses of the direction-vs-magnitude analysis). Rows are right-padded:
a causal model never attends from a token to the padding after it, so a row's
scores do not depend on its batch.

``reduce="mean"``: a sentence's mean next-token cross-entropy (the LM loss);
``"sum"``: its total NLL, ``-log P(sentence | first token)`` (BOS first where
the model prepends one), which minimal-pair benchmarks compare.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError

__all__ = ["REDUCTIONS", "Batch", "sentence_batches", "sentence_nll"]

REDUCTIONS = ("mean", "sum")
Batch = tuple[Int[Tensor, "b pos"], Int[Tensor, "b"]]


def sentence_batches(
    model, sentences: Sequence[str], *, max_tokens: int = 64, batch_size: int = 16, keep_all: bool = False
) -> list[Batch]:
    """``(tokens, lengths)`` batches in sentence order, right-padded. Sentences of fewer than 2
    tokens are dropped, unless ``keep_all`` (then they are an error: pairs must stay aligned)."""
    if not sentences:
        raise InputError("no sentences to score")
    if max_tokens < 2 or batch_size < 1:
        raise InputError(f"max_tokens must be >= 2 and batch_size >= 1, got {max_tokens}, {batch_size}")
    rows = [model.to_tokens(s)[0, :max_tokens].cpu() for s in sentences]
    short = [i for i, r in enumerate(rows) if r.numel() < 2]
    if short and keep_all:
        raise InputError(f"sentence(s) {short[:5]} have fewer than 2 tokens: nothing to score")
    rows = [r for r in rows if r.numel() >= 2]
    if not rows:
        raise InputError("no sentence has 2 tokens or more")
    pad = model.tokenizer.pad_token_id if getattr(model.tokenizer, "pad_token_id", None) is not None else 0
    out = []
    for i in range(0, len(rows), batch_size):
        chunk = rows[i : i + batch_size]
        lengths = torch.tensor([r.numel() for r in chunk])
        toks = torch.full((len(chunk), int(lengths.max())), pad, dtype=torch.long)
        for j, r in enumerate(chunk):
            toks[j, : r.numel()] = r
        out.append((toks, lengths))
    return out


def sentence_nll(
    logits: Float[Tensor, "b pos vocab"], tokens: Int[Tensor, "b pos"], lengths: Int[Tensor, "b"], reduce: str = "mean"
) -> Float[Tensor, "b"]:
    """Next-token NLL (nats, float32) of each row over its ``length - 1`` predictions, mean or sum.

    One row at a time: no copy of the whole ``[b, pos, vocab]`` logits."""
    if reduce not in REDUCTIONS:
        raise InputError(f"unknown reduce {reduce!r}; choose from {REDUCTIONS}")
    tokens = tokens.to(logits.device)
    return torch.stack(
        [
            F.cross_entropy(logits[i, : n - 1].float(), tokens[i, 1:n], reduction=reduce)
            for i, n in enumerate(lengths.tolist())
        ]
    ).cpu()
