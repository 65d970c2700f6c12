"""Subject–verb agreement from BLiMP's one-prefix paradigms."""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Sequence

from ...errors import InputError
from ...evals.blimp import AGREEMENT, blimp_rows
from .base import Task, _Candidate, _check_n, _encode, _make_task, _select


# ---------------------------------------------------------------------------------------------
# subject–verb agreement (BLiMP one-prefix paradigms)

# the four paradigms of AGREEMENT whose rows have one_prefix_method true (the *_2 ones have none)
ONE_PREFIX: tuple[str, ...] = tuple(
    p
    for p in AGREEMENT
    if p
    in {
        "regular_plural_subject_verb_agreement_1",
        "irregular_plural_subject_verb_agreement_1",
        "distractor_agreement_relational_noun",
        "distractor_agreement_relative_clause",
    }
)


def agreement_task(
    tokenizer, *, n: int, seed: int = 0, bos: int | None = None, paradigms: Sequence[str] = ONE_PREFIX
) -> Task:
    """Subject–verb agreement from BLiMP's one-prefix rows: ``"The cups"`` -> good verb rather than bad verb.

    Clean prompt = ``one_prefix_prefix``; ``correct`` / ``wrong`` = the first token of
    ``" " + one_prefix_word_good`` / ``" " + one_prefix_word_bad`` (``[n, 1]``); rows whose two
    first tokens are equal are dropped. Corruption: the corrupted prompt is the prefix of another
    row B of the same paradigm whose answer pair is swapped, i.e. first token of good_B == first
    token of bad_A and of bad_B == of good_A (its subject has the opposite number), with the same
    token length; B is drawn with the seed among all such rows, and rows with none are dropped. So
    the corrupted prompt prefers the clean prompt's wrong verb. Metric ``logit_diff``; positions
    ``"end"``. Rows are grouped by token length and the first ``n`` of the largest group (ties: the
    shorter) in a seeded order are kept: fewer than ``n`` only if fewer exist, :class:`TaskError`
    if fewer than 2.
    """
    _check_n(n)
    paradigms = tuple(paradigms)
    if not paradigms:
        raise InputError(f"no paradigms given; one-prefix ones: {list(ONE_PREFIX)}")
    rng = random.Random(seed)
    cands: list[_Candidate] = []
    for paradigm in paradigms:
        rows = [r for r in blimp_rows(paradigm) if r.get("one_prefix_method")]
        if not rows:
            raise InputError(f"BLiMP paradigm {paradigm!r} has no one-prefix rows; choose from {list(ONE_PREFIX)}")
        items, seen = [], set()
        for r in rows:
            key = (r["one_prefix_prefix"], r["one_prefix_word_good"], r["one_prefix_word_bad"])
            if key in seen:
                continue
            seen.add(key)
            good = _encode(tokenizer, " " + r["one_prefix_word_good"])
            bad = _encode(tokenizer, " " + r["one_prefix_word_bad"])
            prefix = _encode(tokenizer, r["one_prefix_prefix"])
            if good and bad and prefix and good[0] != bad[0]:
                items.append((r, prefix, good[0], bad[0]))
        by_key: dict[tuple[int, int, int], list[int]] = defaultdict(list)
        for j, (_, prefix, g, b) in enumerate(items):
            by_key[(len(prefix), g, b)].append(j)
        for r, prefix, g, b in items:
            partners = by_key.get((len(prefix), b, g), [])
            if not partners:
                continue
            other_r, other_prefix, _, _ = items[rng.choice(partners)]
            cands.append(
                _Candidate(prefix, other_prefix, [g], [b], {}, r["one_prefix_prefix"], other_r["one_prefix_prefix"])
            )
    chosen = _select(cands, n, seed, "the agreement task")
    return _make_task(
        "agreement",
        chosen,
        "logit_diff",
        bos,
        "BLiMP subject-verb agreement (one-prefix): good vs bad verb; corrupted = a prefix "
        "of the opposite number from the same paradigm",
    )
