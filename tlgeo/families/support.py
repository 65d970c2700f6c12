"""The support matrix: every family x site and analysis, supported, supported with a documented
difference, or refused with the reason. The code enforces it (:func:`check_support`, called by the site
adapter, and by the runner for an analysis whose record has a support rule) and the README's table and
``tlgeo models --support`` print it, all from :func:`support`: a family's own cells (``Family.support``, in
its module) first, then the rules over the traits every family declares. The sites' rules are here; every
other column is an analysis's, registered with its rule (:func:`register_support`, which
:func:`tlgeo.runner.analysis.register_analysis` calls with a record's ``support``): this layer knows no
analysis by name.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import pandas as pd

from ..errors import InputError, UnknownNameError, UserError
from .family import Family, Support
from .registry import FAMILIES, family_of

__all__ = [
    "Support",
    "SITE_COLUMNS",
    "support",
    "support_table",
    "check_support",
    "UnsupportedError",
    "markdown_table",
    "register_support",
    "columns",
    "support_rule",
]

SITE_COLUMNS = ("attn", "mlp", "block", "value_full", "value_excl_self", "diag")
Rule = Callable[[Family], Support]
_RULES: dict[str, Rule] = {}  # column -> rule(family) -> Support: an analysis's own column (register_support)


def register_support(column: str, rule: Rule) -> None:
    """Add ``column`` (an analysis) to the matrix, ``rule(family) -> Support`` its cells (what
    :func:`tlgeo.runner.analysis.register_analysis` does with a record's ``support``). Registering the same
    rule again is a no-op."""
    if column in SITE_COLUMNS:
        raise InputError(f"support column {column!r} is a site's; name the analysis otherwise")
    old = _RULES.get(column)
    if old is not None and getattr(old, "__qualname__", old) != getattr(rule, "__qualname__", rule):
        raise InputError(f"support column {column!r} already has a rule ({old!r})")
    _RULES[column] = rule


def support_rule(column: str) -> Rule | None:
    """The rule registered for the analysis column ``column`` (``None`` for a site or an unknown name)."""
    return _RULES.get(column)


def columns() -> tuple[str, ...]:
    """Every column: the sites, then the analyses' columns as they were registered (:func:`register_support`)."""
    return SITE_COLUMNS + tuple(_RULES)


class UnsupportedError(UserError, ValueError):
    """An analysis or site that means nothing (or something else) on this model's family."""


_YES = Support("yes")


def _no_attention(f: Family, what: str) -> Support:
    return Support("no", f"{what} need attention and MLP sublayers: {f.name} blocks have a state-space mixer only")


def support(family: Family | str, column: str) -> Support:
    """What ``column`` (a site, or an analysis's registered column) means on ``family``: the family's own
    cell (``Family.support``) if it has one, else the column's rule (for a site, the rules below, which read
    its traits)."""
    f = family if isinstance(family, Family) else FAMILIES[family]
    if column not in SITE_COLUMNS and column not in _RULES:
        raise UnknownNameError(f"unknown support column {column!r}; choose from {columns()}")
    if column in f.support:
        return f.support[column]
    if column in _RULES:
        got = _RULES[column](f)
        if not isinstance(got, Support):
            raise TypeError(f"the support rule of {column!r} returned {got!r}, not a Support")
        return got
    return _site(f, column)


def _site(f: Family, column: str) -> Support:
    """The rules of the sites, over ``f``'s traits."""
    post_ln = (
        "post-LN: the update is measured against the state it is added to; the norm after the add "
        "then rescales the sum, so the parallel part also turns it"
    )
    if column in ("attn", "mlp"):
        if not f.attention:
            return _no_attention(f, "residual attention / MLP sites")
        if f.post_ln:
            return Support(
                "differs",
                post_ln
                + (
                    " (the MLP's reference is ln1's output, the renormalised state it reads)" if column == "mlp" else ""
                ),
            )
        if f.post_norms:
            return Support("differs", "the update is the post-norm output the residual receives")
        if column == "mlp" and f.parallel:
            return Support("differs", "parallel block: the MLP update is measured against resid_pre (no resid_mid)")
        if column == "mlp" and f.moe:
            return Support("differs", "the MLP update is the router-weighted sum of the chosen experts")
        return _YES
    if column == "block":
        if not f.attention:
            return Support("differs", "the block update is the mixer's output")
        if f.post_ln:
            return Support("differs", "post-LN: resid_post - resid_pre includes both renormalisations")
        return _YES
    # value_full, value_excl_self, diag
    if not f.attention:
        return Support("no", f"value-space sites need attention weights: {f.name} has none")
    if f.sinks:
        return Support(
            "differs",
            {
                "value_full": "sinks: o_t weighs the values by less than 1 in all (the sink's mass reaches no value)",
                "value_excl_self": "sinks: the sink's mass is neither self nor non-self (it reaches no value)",
                "diag": "sinks: the other keys are rescaled to keep the row's own sum, the sink's mass unchanged",
            }[column],
        )
    if f.post_norms:
        return Support("differs", "the edited heads' output passes through the post-attention norm")
    return _YES


def support_table(families: list[Family] | None = None, cols: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per family, one column per site and analysis (``yes``, ``yes*``, ``no``); ``cols``: those
    columns, in that order (default :func:`columns`)."""
    rows = []
    for f in families or FAMILIES.values():
        rows.append({"family": f.name, **{c: support(f, c).cell() for c in cols or columns()}})
    return pd.DataFrame(rows).set_index("family")


def _reasons(f: Family, skip: set[tuple[str, str]], cols: Sequence[str]) -> str:
    """``f``'s differences and refusals, columns with the same reason together."""
    by_why: dict[tuple[str, str], list[str]] = {}
    for c in cols:
        s = support(f, c)
        if s.status != "yes" and (c, s.why) not in skip:
            by_why.setdefault((s.status, s.why), []).append(f"`{c}`")
    return "; ".join(
        f"{', '.join(cols)}{' (refused)' if status == 'no' else ''}: {why}" for (status, why), cols in by_why.items()
    )


def markdown_table(cols: Sequence[str] | None = None) -> str:
    """The README's support matrix and its notes, generated from :func:`support`; ``cols`` as in
    :func:`support_table`."""
    cols = tuple(cols or columns())
    table = support_table(cols=cols)
    lines = ["| family | " + " | ".join(table.columns) + " |", "|---" * (len(table.columns) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(row) + " |" for name, row in table.iterrows()]
    lines += ["", "`yes*`: supported with a documented difference; `no`: refused with the reason."]
    shared = {
        (c, support(f, c).why)
        for f in FAMILIES.values()
        for c in cols
        if len({support(g, c).why for g in FAMILIES.values()}) == 1 and support(f, c).status != "yes"
    }
    lines += [f"`{c}` on every family: {why}." for c, why in sorted(shared)] + [""]
    for f in FAMILIES.values():
        reasons = _reasons(f, shared, cols)
        lines.append(f"- **{f.name}**: {f.differs}" + (f". {reasons}" if reasons else ""))
    return "\n".join(lines)


def check_support(model: Any, *columns: str) -> None:
    """Raise :class:`UnsupportedError` (one line, the reason) if ``model``'s family refuses a column.

    A model of no known family passes: tlgeo has no rule for it (``tlgeo models --support`` says so).
    """
    f = family_of(model)
    if f is None:
        return
    for c in columns:
        s = support(f, c)
        if not s.ok:
            arch = getattr(getattr(model, "cfg", None), "architecture", None) or f.name
            raise UnsupportedError(f"{c} on {arch}: {s.why}")
