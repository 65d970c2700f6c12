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
not its check.

A claim can fail: it carries counterexamples (``false_if=``), each a small :class:`Counterexample` edit of its
tables that makes its sentence false, and :meth:`Claims.refute` evaluates it on each. The edits are built from
:func:`edit` (set or transform the cells of the rows that match), with shorthands for the recurring kinds of
claim: :func:`no_longer_differs` (the CI widened to hold 0), :func:`insignificant` (q and p set to 0.2),
:func:`scale`, :func:`shift`, and :func:`both` (several edits at once)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Union

import numpy as np
import pandas as pd

from ..errors import InputError

__all__ = [
    "Claim",
    "Verdict",
    "Claims",
    "Counterexample",
    "differs",
    "ci_excludes_zero",
    "cited",
    "uncited_findings",
    "generated_blocks",
    "CITE",
    "edit",
    "scale",
    "shift",
    "no_longer_differs",
    "insignificant",
    "both",
]

CITE = re.compile(r"`\[(interpretation|\d+\.[a-z0-9][a-z0-9.\-]*)\]`")  # `[5.par-moves-nothing]`, `[interpretation]`
ALPHA = 0.05


@dataclass(frozen=True)
class Verdict:
    """Whether a claim holds on its tables, and the numbers that decided it."""

    holds: bool
    detail: str = ""


@dataclass(frozen=True)
class Counterexample:
    """An edit of a claim's tables that makes its sentence false: ``apply(tables) -> tables`` on the list of its
    DataFrames (copies), and what the edit says in words."""

    says: str
    apply: Callable[[list[pd.DataFrame]], list[pd.DataFrame]]


@dataclass(frozen=True)
class Claim:
    """One sentence of a results document and its check: ``check(*tables) -> Verdict | bool`` on the
    DataFrames of ``tables`` (read from ``root / path``, in that order), and the counterexamples it must fail on."""

    id: str
    sentence: str
    tables: tuple[str, ...]
    check: Callable[..., "Verdict | bool"]
    counterexamples: tuple[Counterexample, ...] = ()

    def evaluate(self, root: Path, read: Callable[[Path], pd.DataFrame] = pd.read_csv) -> Verdict:
        return self.evaluate_on([read(Path(root) / t) for t in self.tables])

    def evaluate_on(self, tables: list[pd.DataFrame]) -> Verdict:
        """The check on DataFrames in :attr:`tables`' order."""
        got = self.check(*tables)
        return got if isinstance(got, Verdict) else Verdict(bool(got))


class Claims:
    """A document's claims by id, registered with :meth:`claim` (a decorator)."""

    def __init__(self) -> None:
        self.by_id: dict[str, Claim] = {}

    def claim(self, id: str, sentence: str, *tables: str, false_if: Iterable[Counterexample] = ()):
        """Register ``fn(*dataframes) -> Verdict | bool`` as claim ``id`` of ``sentence`` over ``tables``, with the
        counterexamples ``false_if`` (edits of those tables that make the sentence false)."""
        if not CITE.fullmatch(f"`[{id}]`") or id == "interpretation":
            raise InputError(f"claim id {id!r} must look like <section>.<words-with-dashes>")
        if id in self.by_id:
            raise InputError(f"claim {id!r} is registered twice")
        counter = tuple(false_if)
        if not all(isinstance(c, Counterexample) for c in counter):
            raise InputError(f"claim {id!r}: false_if takes Counterexample edits (edit(), scale(), ...)")

        def wrap(fn: Callable[..., "Verdict | bool"]):
            self.by_id[id] = Claim(id, sentence, tuple(tables), fn, counter)
            return fn

        return wrap

    @staticmethod
    def _reader() -> Callable[[Path], pd.DataFrame]:
        cache: dict[Path, pd.DataFrame] = {}

        def read(path: Path) -> pd.DataFrame:
            if path not in cache:
                cache[path] = pd.read_csv(path)
            return cache[path].copy()

        return read

    def evaluate(self, root: str | Path) -> pd.DataFrame:
        """One row per claim: ``id``, ``holds``, ``detail``, ``sentence`` (tables read once each)."""
        read = self._reader()
        rows = []
        for c in self.by_id.values():
            v = c.evaluate(Path(root), read)
            rows.append({"id": c.id, "holds": v.holds, "detail": v.detail, "sentence": c.sentence})
        return pd.DataFrame(rows, columns=["id", "holds", "detail", "sentence"])

    def refute(self, root: str | Path, ids: Iterable[str] | None = None) -> pd.DataFrame:
        """One row per counterexample of each claim (of ``ids``, default all): ``id``, ``says``, ``holds`` (what the
        claim evaluates to on the edited tables: it should be False), ``detail``."""
        read = self._reader()
        rows = []
        for cid in self.by_id if ids is None else ids:
            c = self.by_id[cid]
            for k in c.counterexamples:
                v = c.evaluate_on(k.apply([read(Path(root) / t) for t in c.tables]))
                rows.append({"id": c.id, "says": k.says, "holds": v.holds, "detail": v.detail})
        return pd.DataFrame(rows, columns=["id", "says", "holds", "detail"])


def ci_excludes_zero(row: Mapping) -> bool:
    """The row's ``ci_low`` .. ``ci_high`` lies on one side of 0."""
    return bool(row["ci_low"] > 0 or row["ci_high"] < 0)


def differs(row: Mapping, q: str = "q", alpha: float = ALPHA) -> bool:
    """What "differs from 0" means in a claim: the 95 % CI excludes 0 and the row's BH ``q`` is below ``alpha``
    (a row without ``q``: the CI and its ``p``)."""
    test = row[q] if q in row and pd.notna(row[q]) else row["p"]
    return ci_excludes_zero(row) and bool(test < alpha)


# -- counterexamples: edits of a claim's tables ----------------------------------------------------------------

# which rows an edit picks: every row (None), ``{column: value}`` matches, or ``df -> bool Series``
Where = Union[Mapping[str, object], Callable[[pd.DataFrame], pd.Series], None]


def _mask(df: pd.DataFrame, where) -> pd.Series:
    """The rows ``where`` picks: every row (None), those equal to each ``{column: value}`` (a list or tuple value:
    any of them), or a ``df -> bool Series`` function."""
    if where is None:
        return pd.Series(True, index=df.index)
    if callable(where):
        return pd.Series(where(df), index=df.index).astype(bool)
    m = pd.Series(True, index=df.index)
    for col, v in where.items():
        if col not in df.columns:
            raise ValueError(f"counterexample: no column {col!r} in {list(df.columns)}")
        m &= df[col].isin(v) if isinstance(v, (list, tuple, set)) else df[col] == v
    return m


def edit(where: Where = None, table: int = 0, says: str = "", **columns) -> Counterexample:
    """Set each ``column=value`` on the rows of the claim's ``table``-th table that ``where`` picks (:func:`_mask`);
    a callable value maps the column's current values to new ones. An edit that picks no row is an error."""

    def apply(tables: list[pd.DataFrame]) -> list[pd.DataFrame]:
        t = tables[table].copy()
        m = _mask(t, where)
        if not m.any():
            raise ValueError(f"counterexample {says or columns}: {where} picks no row")
        for col, v in columns.items():
            if col not in t.columns:
                raise ValueError(f"counterexample: no column {col!r} in {list(t.columns)}")
            new = v(t.loc[m, col]) if callable(v) else v
            if t[col].dtype.kind in "iu" and np.asarray(new).dtype.kind == "f":
                t[col] = t[col].astype(float)
            t.loc[m, col] = new
        return [*tables[:table], t, *tables[table + 1 :]]

    what = ", ".join(f"{c} changed" if callable(v) else f"{c} = {v!r}" for c, v in columns.items())
    return Counterexample(says or f"{what} where {where if where is not None else 'every row'}", apply)


def scale(where: Where, column: str, factor: float, table: int = 0, says: str = "") -> Counterexample:
    """``column`` times ``factor`` on the picked rows."""
    return edit(where, table, says or f"{column} x {factor} where {where}", **{column: lambda x: x * factor})


def shift(where: Where, column: str, by: float, table: int = 0, says: str = "") -> Counterexample:
    """``column`` plus ``by`` on the picked rows."""
    return edit(where, table, says or f"{column} {by:+g} where {where}", **{column: lambda x: x + by})


def no_longer_differs(
    where: Where, table: int = 0, low: str = "ci_low", high: str = "ci_high", says: str = ""
) -> Counterexample:
    """The picked rows' interval widened to hold 0 (what "differs from 0" must then deny)."""
    return edit(
        where,
        table,
        says or f"the interval of {where} widened to hold 0",
        **{low: lambda x: np.minimum(x, 0.0) - 0.01, high: lambda x: np.maximum(x, 0.0) + 0.01},
    )


def insignificant(where: Where, table: int = 0, q: float = 0.2, says: str = "") -> Counterexample:
    """The picked rows' ``q`` (and ``p`` and ``q_bh``, where the table has them) set to ``q``, 0.2 by default."""

    def apply(tables: list[pd.DataFrame]) -> list[pd.DataFrame]:
        cols = {c: q for c in ("q", "p", "q_bh") if c in tables[table].columns}
        return edit(where, table, **cols).apply(tables)

    return Counterexample(says or f"q of {where} set to {q}", apply)


def both(*edits: Counterexample, says: str = "") -> Counterexample:
    """Several edits applied in turn, as one counterexample."""

    def apply(tables: list[pd.DataFrame]) -> list[pd.DataFrame]:
        for e in edits:
            tables = e.apply(tables)
        return tables

    return Counterexample(says or "; ".join(e.says for e in edits), apply)


# -- the document side --------------------------------------------------------------------------------------

# words that make a sentence a finding that a table must back: comparisons, quantifiers, verdicts
_CHECKABLE = re.compile(
    r"\d|\b(more|less|fewer|than|every|none|all|no|not|only|agree\w*|differ\w*|same|below|above|larg\w*|small\w*|"
    r"strong\w*|weak\w*|gone|surviv\w*|vanish\w*|exceed\w*|between|most\w*|entirely|revers\w*|dominat\w*|"
    r"catastrophic|free|twice|times|half|passes|pass)\b",
    re.I,
)
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
    return {
        m.group(1): m.group(2).strip()
        for m in re.finditer(r"<!--\s*table:\s*(\S+)\s*-->(.*?)<!--\s*/table\s*-->", text, flags=re.S)
    }
