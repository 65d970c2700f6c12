"""BLiMP minimal pairs: a pair is right when ``log P(good) > log P(bad)`` (whole sentences).

The six subject–verb agreement paradigms are read from ``<data>/blimp/<name>.jsonl``
(``../shared/data``, offline); online users without that folder get them from
the hub (``nyu-mll/blimp``). Sentences are scored whole, BOS first where the
model prepends one (:func:`tlgeo.evals.sentences.sentence_nll`, ``"sum"``).
Accuracy is in percent with a percentile bootstrap CI over pairs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Bool
from torch import Tensor

from ..errors import InputError
from ..stats import bootstrap_ci
from .sentences import sentence_batches, sentence_nll

__all__ = [
    "AGREEMENT",
    "MinimalPair",
    "blimp_rows",
    "load_blimp",
    "pair_nll",
    "pair_correct",
    "accuracy_rows",
    "evaluate_blimp",
]

AGREEMENT: tuple[str, ...] = (
    "regular_plural_subject_verb_agreement_1",
    "regular_plural_subject_verb_agreement_2",
    "irregular_plural_subject_verb_agreement_1",
    "irregular_plural_subject_verb_agreement_2",
    "distractor_agreement_relational_noun",
    "distractor_agreement_relative_clause",
)
Hook = tuple[str | Callable, Callable]


@dataclass(frozen=True)
class MinimalPair:
    good: str
    bad: str
    paradigm: str
    pair_id: str


def blimp_rows(paradigm: str) -> list[dict]:
    """The raw rows of a BLiMP paradigm (``sentence_good``, ``sentence_bad``, ``one_prefix_method``, ...),
    offline from ``<data>/blimp`` (from the hub, for online users, where there is no copy)."""
    from ..data import data_dir

    try:
        path = data_dir() / "blimp" / f"{paradigm}.jsonl"
    except FileNotFoundError:
        path = None
    if path is not None and path.is_file():
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if path is not None and path.parent.is_dir():
        known = sorted(p.stem for p in path.parent.glob("*.jsonl"))
        raise InputError(f"unknown BLiMP paradigm {paradigm!r}; offline ones: {known}")
    from datasets import load_dataset  # no offline copy: the hub

    return [dict(r) for r in load_dataset("nyu-mll/blimp", paradigm, split="train")]


def load_blimp(paradigm: str, limit: int | None = None) -> list[MinimalPair]:
    """The first ``limit`` pairs of a BLiMP paradigm (all 1000 by default)."""
    if limit is not None and limit < 1:
        raise InputError(f"limit must be a positive integer, got {limit!r}")
    rows = blimp_rows(paradigm)
    rows = rows[:limit] if limit is not None else rows
    return [
        MinimalPair(r["sentence_good"], r["sentence_bad"], paradigm, str(r.get("pairID", i)))
        for i, r in enumerate(rows)
    ]


def pair_nll(
    model, pairs: Sequence[MinimalPair], *, fwd_hooks: Iterable[Hook] = (), batch_size: int = 16
) -> tuple[Tensor, Tensor]:
    """``(nll_good, nll_bad)``: each sentence's total NLL under ``fwd_hooks``."""
    if not pairs:
        raise InputError("no minimal pairs to score")
    sentences = [p.good for p in pairs] + [p.bad for p in pairs]
    hooks = list(fwd_hooks)
    scores = []
    with torch.inference_mode():
        for toks, lengths in sentence_batches(model, sentences, batch_size=batch_size, max_tokens=10**6, keep_all=True):
            logits = model.run_with_hooks(toks, fwd_hooks=hooks) if hooks else model(toks)
            scores.append(sentence_nll(logits, toks, lengths, "sum"))
    s = torch.cat(scores)
    return s[: len(pairs)], s[len(pairs) :]


def pair_correct(nll_good: Tensor, nll_bad: Tensor) -> Bool[Tensor, "n"]:
    """``log P(good) > log P(bad)`` per pair (a tie counts as wrong)."""
    return nll_good < nll_bad


def accuracy_rows(correct: Tensor, paradigms: Sequence[str], *, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Accuracy (%) with a bootstrap CI per paradigm and pooled: ``paradigm, n, accuracy, ci_low, ci_high``."""
    c = correct.numpy().astype(float)
    names = np.asarray(paradigms)
    rows = []
    for name in [*dict.fromkeys(paradigms), "pooled"]:
        x = c if name == "pooled" else c[names == name]
        lo, hi = bootstrap_ci(x, n_boot=n_boot, seed=seed) if len(x) > 1 else (float(x.mean()), float(x.mean()))
        rows.append(
            {
                "paradigm": name,
                "n": int(len(x)),
                "accuracy": 100 * float(x.mean()),
                "ci_low": 100 * lo,
                "ci_high": 100 * hi,
            }
        )
    return pd.DataFrame(rows)


def evaluate_blimp(
    model,
    paradigms: Iterable[str] = AGREEMENT,
    *,
    limit: int | None = None,
    fwd_hooks: Iterable[Hook] = (),
    batch_size: int = 16,
    n_boot: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """BLiMP accuracy per paradigm and pooled, under ``fwd_hooks``."""
    pairs = [p for name in paradigms for p in load_blimp(name, limit)]
    good, bad = pair_nll(model, pairs, fwd_hooks=fwd_hooks, batch_size=batch_size)
    return accuracy_rows(pair_correct(good, bad), [p.paradigm for p in pairs], n_boot=n_boot, seed=seed)
