"""RULER's scoring by string matching, in percent."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ...errors import InputError

__all__ = ["string_match_all", "string_match_part", "first_word", "METRICS"]


def _check(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> None:
    if len(preds) != len(refs):
        raise InputError(f"{len(preds)} predictions for {len(refs)} reference lists")
    if not preds:
        raise InputError("no predictions to score")
    if any(len(r) == 0 for r in refs):
        raise InputError("a reference list is empty")


def string_match_all(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """Mean over samples of the fraction of references found in the output (case-insensitive), x100."""
    _check(preds, refs)
    return 100.0 * float(np.mean([sum(r.lower() in p.lower() for r in rs) / len(rs) for p, rs in zip(preds, refs)]))


def string_match_part(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """Mean over samples of whether any reference is found in the output (case-insensitive), x100."""
    _check(preds, refs)
    return 100.0 * float(np.mean([max(float(r.lower() in p.lower()) for r in rs) for p, rs in zip(preds, refs)]))


def first_word(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """Mean over samples of whether the output's first word is a reference (case-insensitive), x100.

    For one-word answers such as yes/no, where substring matching would count
    "no" inside "not" or "know"."""
    _check(preds, refs)
    firsts = [(re.findall(r"[a-z0-9]+", p.lower()) or [""])[0] for p in preds]
    return 100.0 * float(np.mean([f in {r.lower() for r in rs} for f, rs in zip(firsts, refs)]))


METRICS = {"string_match_all": string_match_all, "string_match_part": string_match_part, "first_word": first_word}
