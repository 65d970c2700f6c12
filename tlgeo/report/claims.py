"""Claims: the sentences of a results document as checks over the tables they read.

A :class:`Claim` has an id, the sentence as the document says it, the tables it reads (paths relative to a
root folder) and a function that evaluates it on those tables. A document cites a claim by its id in a code
span, `` `[5.par-moves-nothing]` ``, inside the sentence it backs (`` `[interpretation]` ``: a sentence that reads
the numbers rather than reporting them); :func:`evaluate` runs every claim on the
tables, :func:`cited` finds the ids a text cites and :func:`uncited_findings` the sentences of its findings
(bullets and paragraphs that open in bold) that say something checkable (a number, a comparison, a
quantifier) without an id. Generated tables sit between ``<!-- table: NAME -->`` and ``<!-- /table -->``
(:func:`generated_blocks`) so that a test compares them with what their script prints now.

The helpers state the rules a claim's words stand for: :func:`differs` (the 95 % CI excludes 0 and q < 0.05),
:func:`ci_excludes_zero`. Write a check as what the sentence says; a claim that turns out false is rewritten,
not its check."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

import pandas as pd

from ..errors import InputError

__all__ = ["Claim", "Verdict", "Claims", "differs", "ci_excludes_zero", "cited", "uncited_findings",
           "generated_blocks", "CITE"]

CITE = re.compile(r"`\[(interpretation|\d+\.[a-z0-9][a-z0-9.\-]*)\]`")  # `[5.par-moves-nothing]`, `[interpretation]`
ALPHA = 0.05


@dataclass(frozen=True)
class Verdict:
    """Whether a claim holds on its tables, and the numbers that decided it."""

    holds: bool
    detail: str = ""


@dataclass(frozen=True)
class Claim:
    """One sentence of a results document and its check: ``check(*tables) -> Verdict | bool`` on the
    DataFrames of ``tables`` (read from ``root / path``, in that order)."""

    id: str
    sentence: str
    tables: tuple[str, ...]
    check: Callable[..., "Verdict | bool"]

    def evaluate(self, root: Path, read: Callable[[Path], pd.DataFrame] = pd.read_csv) -> Verdict:
        got = self.check(*(read(Path(root) / t) for t in self.tables))
        return got if isinstance(got, Verdict) else Verdict(bool(got))


class Claims:
    """A document's claims by id, registered with :meth:`claim` (a decorator)."""

    def __init__(self) -> None:
        self.by_id: dict[str, Claim] = {}

    def claim(self, id: str, sentence: str, *tables: str):
        """Register ``fn(*dataframes) -> Verdict | bool`` as claim ``id`` of ``sentence`` over ``tables``."""
        if not CITE.fullmatch(f"`[{id}]`") or id == "interpretation":
            raise InputError(f"claim id {id!r} must look like <section>.<words-with-dashes>")
        if id in self.by_id:
            raise InputError(f"claim {id!r} is registered twice")

        def wrap(fn: Callable[..., "Verdict | bool"]):
            self.by_id[id] = Claim(id, sentence, tuple(tables), fn)
            return fn

        return wrap

    def evaluate(self, root: str | Path) -> pd.DataFrame:
        """One row per claim: ``id``, ``holds``, ``detail``, ``sentence`` (tables read once each)."""
        cache: dict[Path, pd.DataFrame] = {}

        def read(path: Path) -> pd.DataFrame:
            if path not in cache:
                cache[path] = pd.read_csv(path)
            return cache[path].copy()

        rows = []
        for c in self.by_id.values():
            v = c.evaluate(Path(root), read)
            rows.append({"id": c.id, "holds": v.holds, "detail": v.detail, "sentence": c.sentence})
        return pd.DataFrame(rows, columns=["id", "holds", "detail", "sentence"])


def ci_excludes_zero(row: Mapping) -> bool:
    """The row's ``ci_low`` .. ``ci_high`` lies on one side of 0."""
    return bool(row["ci_low"] > 0 or row["ci_high"] < 0)


def differs(row: Mapping, q: str = "q", alpha: float = ALPHA) -> bool:
    """What "differs from 0" means in a claim: the 95 % CI excludes 0 and the row's BH ``q`` is below ``alpha``
    (a row without ``q``: the CI and its ``p``)."""
    test = row[q] if q in row and pd.notna(row[q]) else row["p"]
    return ci_excludes_zero(row) and bool(test < alpha)


# -- the document side --------------------------------------------------------------------------------------

# words that make a sentence a finding that a table must back: comparisons, quantifiers, verdicts
_CHECKABLE = re.compile(
    r"\d|\b(more|less|fewer|than|every|none|all|no|not|only|agree\w*|differ\w*|same|below|above|larg\w*|small\w*|"
    r"strong\w*|weak\w*|gone|surviv\w*|vanish\w*|exceed\w*|between|most\w*|entirely|revers\w*|dominat\w*|"
    r"catastrophic|free|twice|times|half|passes|pass)\b", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*\"(])")


def cited(text: str) -> list[str]:
    """The claim ids ``text`` cites, in order."""
    return CITE.findall(text)


def _findings(text: str) -> Iterable[str]:
    """The finding blocks of ``text``: each bullet and each paragraph that opens in bold, joined to one line,
    comments and generated tables left out."""
    text = re.sub(r"<!--\s*table:.*?<!--\s*/table\s*-->", "", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    block: list[str] = []
    for line in [*text.splitlines(), ""]:
        starts = line.startswith("- ") or line.startswith("**")
        if (starts or not line.strip() or line.startswith(("#", "|"))) and block:
            yield " ".join(block)
            block = []
        if starts:
            block = [line[2:] if line.startswith("- ") else line]
        elif block and line.strip() and not line.startswith(("#", "|")):
            block.append(line.strip())


def uncited_findings(text: str) -> list[str]:
    """The sentences of ``text``'s findings (:func:`_findings`) that say something checkable (a number, a
    comparison, a quantifier) and cite no claim."""
    out = []
    for block in _findings(text):
        for sentence in _SENTENCE_END.split(block):
            bare = re.sub(r"`[^`]*`", "", sentence)  # code (commands, names, ids) is not a finding
            if _CHECKABLE.search(bare) and not CITE.search(sentence):
                out.append(sentence.strip())
    return out


def generated_blocks(text: str) -> dict[str, str]:
    """``{name: body}`` of every ``<!-- table: NAME -->`` ... ``<!-- /table -->`` block of ``text``."""
    return {m.group(1): m.group(2).strip() for m in
            re.finditer(r"<!--\s*table:\s*(\S+)\s*-->(.*?)<!--\s*/table\s*-->", text, flags=re.S)}
