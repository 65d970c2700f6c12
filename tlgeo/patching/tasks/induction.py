"""Induction: random tokens repeated; the corrupted first half is other tokens."""

from __future__ import annotations

import torch

from .base import Task, TaskError, _check_n
from ...errors import InputError


# ---------------------------------------------------------------------------------------------
# induction


LOOKBACK_FILL = 255  # the lookback: data's filler byte (tlgeo.train.data.FILL; patching imports no train)


def _ordinary_ids(
    tokenizer, n: int, length: int, need: int, min_id: int | None, max_id: int | None, task: str
) -> torch.Tensor:
    """The ids a random-token task draws from: ``[min_id, max_id)`` (defaults: 100, or 3 for a vocabulary under 300
    tokens; the tokenizer's size) less the special ids; ``TaskError`` when fewer than ``need`` are left."""
    _check_n(n)
    if not isinstance(length, int) or length < 2:
        raise InputError(f"length must be an integer >= 2, got {length!r}")
    size = len(tokenizer)
    lo = (3 if size < 300 else 100) if min_id is None else int(min_id)
    hi = size if max_id is None else int(max_id)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    ids = torch.tensor([i for i in range(max(lo, 0), hi) if i not in special], dtype=torch.long)
    if ids.numel() < need:
        raise TaskError(f"{task}: only {ids.numel()} ordinary token ids in [{lo}, {hi}); length {length} needs {need}")
    return ids


def induction_task(
    tokenizer,
    *,
    n: int,
    seed: int = 0,
    bos: int | None = None,
    length: int = 10,
    min_id: int | None = None,
    max_id: int | None = None,
) -> Task:
    """Induction on repeated random tokens: ``r1..rL r1..r(L-1)`` -> ``rL``.

    ``length`` distinct ids are drawn per prompt from ``[min_id, max_id)`` minus the tokenizer's special
    ids (defaults: ``min_id`` 100, or 3 for a vocabulary under 300 tokens; ``max_id`` the tokenizer's
    size). Clean = ``[bos] r1..rL r1..r(L-1)``; corrupted = ``[bos] q1..qL r1..r(L-1)`` with ``length``
    fresh distinct ids (no repeat, so nothing to copy). ``correct`` = ``rL`` (``[n, 1]``), ``wrong`` all
    -1; metric ``logprob``; positions ``"end"``. All prompts have length ``2 * length - 1`` (+ BOS), so
    exactly ``n`` rows are made. Works on any tokenizer with ``2 * length`` ordinary ids.
    """
    ids = _ordinary_ids(tokenizer, n, length, 2 * length, min_id, max_id, "induction")
    gen = torch.Generator().manual_seed(seed)
    pre = [] if bos is None else [int(bos)]
    clean, corrupted, correct = [], [], []
    for _ in range(n):
        draw = ids[torch.randperm(ids.numel(), generator=gen)[: 2 * length]].tolist()
        r, q = draw[:length], draw[length:]
        clean.append(pre + r + r[:-1])
        corrupted.append(pre + q + r[:-1])
        correct.append([r[-1]])
    return Task(
        name="induction",
        clean=torch.tensor(clean),
        corrupted=torch.tensor(corrupted),
        correct=torch.tensor(correct),
        wrong=torch.full((n, 1), -1, dtype=torch.long),
        metric="logprob",
        description=f"induction on {length} repeated random tokens: log P(r_L); corrupted first half fresh",
    )


def _query_marker(tokenizer, sep: int | None) -> int:
    """``sep``, or by default the tokenizer's BOS, else its EOS: the separator of ``tlgeo train``'s
    ``predecessor:`` and ``lookback:`` data on the byte tokenizer."""
    if sep is not None:
        return int(sep)
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def predecessor_task(
    tokenizer,
    *,
    n: int,
    seed: int = 0,
    bos: int | None = None,
    length: int = 10,
    min_id: int | None = None,
    max_id: int | None = None,
    sep: int | None = None,
) -> Task:
    """The token before a token: ``r1..rL SEP rj`` -> ``r(j-1)`` (a head that attends from ``rj`` to its earlier
    occurrence copies what a previous-token head wrote there: V-composition; induction is its K-composition twin),
    the format of ``tlgeo train``'s ``predecessor:`` data.

    ``length`` distinct ids per prompt as in :func:`induction_task`, ``j`` drawn from ``2..L``; ``sep`` the query
    marker (default the tokenizer's BOS, else its EOS: the ``predecessor:`` data's separator on the byte
    tokenizer). Clean = ``[bos] r1..rL SEP rj``; corrupted = the same with ``r(j-1)`` replaced by a fresh id (the
    query's earlier occurrence now follows another token). ``correct`` = ``r(j-1)``, metric ``logprob``,
    positions ``"end"``; every prompt has ``length + 2`` tokens (+ BOS)."""
    ids = _ordinary_ids(tokenizer, n, length, length + 1, min_id, max_id, "predecessor")
    gen = torch.Generator().manual_seed(seed)
    pre = [] if bos is None else [int(bos)]
    sep = _query_marker(tokenizer, sep)
    clean, corrupted, correct = [], [], []
    for _ in range(n):
        draw = ids[torch.randperm(ids.numel(), generator=gen)[: length + 1]].tolist()
        r, fresh = draw[:length], draw[length]
        j = int(torch.randint(1, length, (1,), generator=gen))  # 0-based: r[j] has a predecessor r[j-1]
        other = list(r)
        other[j - 1] = fresh
        clean.append(pre + r + [int(sep), r[j]])
        corrupted.append(pre + other + [int(sep), r[j]])
        correct.append([r[j - 1]])
    return Task(
        name="predecessor",
        clean=torch.tensor(clean),
        corrupted=torch.tensor(corrupted),
        correct=torch.tensor(correct),
        wrong=torch.full((n, 1), -1, dtype=torch.long),
        metric="logprob",
        description=f"the token before a query token among {length} random tokens: log P(r_(j-1)); corrupted: "
        f"r_(j-1) replaced",
    )


def lookback_task(
    tokenizer,
    *,
    n: int,
    seed: int = 0,
    bos: int | None = None,
    length: int = 10,
    min_id: int | None = None,
    max_id: int | None = None,
    sep: int | None = None,
    fill: int | None = None,
) -> Task:
    """The token before a token, answered one position later: ``r1..rL SEP rj FILL`` -> ``r(j-1)``, the format of
    ``tlgeo train``'s ``lookback:`` data. At ``FILL`` a head must query with ``rj``, which a previous-token head wrote
    there (Q-composition), for the earlier ``rj``, and read ``r(j-1)``, which a previous-token head wrote at it
    (V-composition).

    ``length`` distinct ids per prompt as in :func:`induction_task`, less ``fill`` (default: the ``lookback:`` data's
    filler, byte id 255); ``j`` drawn from ``2..L``; ``sep`` as in :func:`predecessor_task`. Clean = ``[bos] r1..rL
    SEP rj FILL``; corrupted = ``[bos] q1..qL SEP qj FILL`` with ``length`` other fresh ids and the same ``j`` (every
    previous-token write differs: at the filler, the q path; at the earlier occurrence, the v path). ``correct`` =
    ``r(j-1)``, ``wrong`` = ``q(j-1)``, metric ``logit_diff``, positions ``"end"``; every prompt has ``length + 3``
    tokens (+ BOS)."""
    fill = LOOKBACK_FILL if fill is None else int(fill)
    ids = _ordinary_ids(tokenizer, n, length, 2 * length, min_id, max_id, "lookback")
    ids = ids[ids != fill]
    if ids.numel() < 2 * length:
        raise TaskError(
            f"lookback: {ids.numel()} ordinary token ids besides the filler; length {length} needs {2 * length}"
        )
    gen = torch.Generator().manual_seed(seed)
    pre = [] if bos is None else [int(bos)]
    sep = _query_marker(tokenizer, sep)
    clean, corrupted, correct, wrong = [], [], [], []
    for _ in range(n):
        draw = ids[torch.randperm(ids.numel(), generator=gen)[: 2 * length]].tolist()
        r, q = draw[:length], draw[length:]
        j = int(torch.randint(1, length, (1,), generator=gen))  # 0-based: r[j] has a predecessor r[j-1]
        clean.append(pre + r + [int(sep), r[j], fill])
        corrupted.append(pre + q + [int(sep), q[j], fill])
        correct.append([r[j - 1]])
        wrong.append([q[j - 1]])
    return Task(
        name="lookback",
        clean=torch.tensor(clean),
        corrupted=torch.tensor(corrupted),
        correct=torch.tensor(correct),
        wrong=torch.tensor(wrong),
        metric="logit_diff",
        description=f"the token before a query token among {length} random tokens, answered after a filler: "
        f"logit(r_(j-1)) - logit(q_(j-1)); corrupted: other tokens",
    )
