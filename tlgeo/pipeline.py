"""The contract between the analyses and ``tlgeo atlas``: steps, their budgets, their context.

An analysis package contributes to the atlas from its own ``atlas`` module:

* one *budgets* dataclass (every field a budget with a default and a help text,
  see :func:`budget`), registered with :func:`register_family`;
* one function per step, registered with :func:`register_step`: it reads its
  budgets from ``ctx.budget``, writes its CSVs through ``ctx.cached`` /
  ``ctx.csv`` and its section of the report through ``ctx.report``;
* optionally a *headline*, ``register_family(name, budgets, headline=fn)``:
  ``fn(out_dir, budgets)`` reads the family's CSVs (whichever steps are done)
  and returns a :class:`Headline` (a few sentences of what the results show,
  with their numbers, and warnings where a budget is too small to conclude
  anything). The report opens with it; it is recomputed after every step.

:mod:`tlgeo.report.atlas` runs what is registered, in registration order, and
``tlgeo atlas`` makes one flag per budget field, so adding an analysis edits
neither. This module holds no model and no report code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

__all__ = ["Step", "StepContext", "Headline", "budget", "register_family", "register_step", "steps",
           "headlines", "family_headline", "budget_fields", "make_budgets"]


@dataclass(frozen=True)
class Step:
    """One atlas step: ``run(ctx)`` writes ``csvs`` (names without ``.csv``) and a report section."""

    name: str
    family: str
    run: Callable[["StepContext"], None]
    csvs: tuple[str, ...]
    description: str


@dataclass
class Headline:
    """What a family's results show, for the top of the report.

    ``sentences``: plain sentences with their numbers, computed from the CSVs
    (the most telling first); ``warnings``: one sentence per budget too small to
    conclude anything from (e.g. "zero-shot: 5 items per task: indication only").
    """

    sentences: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.sentences or self.warnings)


HeadlineFn = Callable[[Path, Any], "Headline | list[str]"]

_FAMILIES: dict[str, type] = {}
_HEADLINES: dict[str, HeadlineFn] = {}
_STEPS: dict[str, Step] = {}


def budget(default: Any, help: str, **meta: Any) -> Any:
    """A budgets-dataclass field: ``default``, a ``help`` text for its flag, and optional
    ``item`` (element type of a tuple or of a ``None`` default), ``choices``, ``flag``
    (the flag's name when it is not ``--<field-name>``), ``cost`` (rough run time it
    drives on a reference machine, e.g. ``"~0.15 s per token (SmolLM2-135M, 2-core CPU)"``,
    shown by ``tlgeo atlas --help``)."""
    return dataclasses.field(default=default, metadata={"help": help, **meta})


def register_family(name: str, budgets: type, headline: HeadlineFn | None = None) -> None:
    """Register an analysis family and its budgets dataclass (field names unique across families).

    ``headline(out_dir, budgets)``, if given, returns the family's :class:`Headline`
    (or a plain list of sentences) computed from the CSVs in ``out_dir``; it must
    cope with steps not yet run (their CSVs missing)."""
    if not dataclasses.is_dataclass(budgets):
        raise TypeError(f"budgets of {name!r} must be a dataclass, got {budgets!r}")
    if name in _FAMILIES and _FAMILIES[name] is not budgets:
        raise ValueError(f"atlas family {name!r} is already registered")
    if headline is not None and not callable(headline):
        raise TypeError(f"headline of {name!r} must be a function (out_dir, budgets) -> Headline, got {headline!r}")
    old = _HEADLINES.get(name)
    if headline is not None and old is not None and old.__qualname__ != headline.__qualname__:
        raise ValueError(f"atlas family {name!r} already has a headline ({old.__qualname__})")
    taken = {f: fam for f, (fam, _) in budget_fields().items() if fam != name}
    clash = sorted(f.name for f in dataclasses.fields(budgets) if f.name in taken)
    if clash:
        raise ValueError(f"budget name(s) {clash} of {name!r} are already used by {taken[clash[0]]!r}")
    _FAMILIES[name] = budgets
    if headline is not None:
        _HEADLINES[name] = headline


def register_step(name: str, family: str, csvs: tuple[str, ...], description: str):
    """Decorator: register ``fn(ctx)`` as atlas step ``name`` of a registered ``family``."""
    if family not in _FAMILIES:
        raise ValueError(f"register the family {family!r} before its steps")

    def wrap(fn: Callable[[StepContext], None]) -> Callable[[StepContext], None]:
        old = _STEPS.get(name)
        if old is not None and old.run.__qualname__ != fn.__qualname__:
            raise ValueError(f"atlas step {name!r} is already registered by {old.family!r}")
        _STEPS[name] = Step(name, family, fn, tuple(csvs), description)
        return fn

    return wrap


def steps() -> dict[str, Step]:
    """The registered steps, in registration order."""
    return dict(_STEPS)


def headlines() -> dict[str, HeadlineFn]:
    """The families' headline functions, by family, in registration order."""
    return {fam: _HEADLINES[fam] for fam in _FAMILIES if fam in _HEADLINES}


def family_headline(family: str, out: Path, budgets: Any) -> Headline:
    """``family``'s :class:`Headline` for the results in ``out`` (empty if it has none)."""
    fn = _HEADLINES.get(family)
    if fn is None:
        return Headline()
    got = fn(Path(out), budgets)
    if isinstance(got, Headline):
        return got
    if isinstance(got, (list, tuple)) and all(isinstance(x, str) for x in got):
        return Headline(list(got))
    raise TypeError(f"headline of {family!r} must return a Headline or a list of str, got {type(got).__name__}")


def budget_fields() -> dict[str, tuple[str, dataclasses.Field]]:
    """Every budget field by name: ``(family, field)``."""
    return {f.name: (fam, f) for fam, cls in _FAMILIES.items() for f in dataclasses.fields(cls)}


def make_budgets(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """One budgets instance per family: defaults, with ``overrides`` (by field name) applied."""
    fields = budget_fields()
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise ValueError(f"unknown atlas budget(s) {unknown}; known: {sorted(fields)}")
    per_family: dict[str, dict[str, Any]] = {fam: {} for fam in _FAMILIES}
    for k, v in overrides.items():
        per_family[fields[k][0]][k] = v
    return {fam: cls(**per_family[fam]) for fam, cls in _FAMILIES.items()}


class StepContext:
    """What a step gets: the run's config, model, text, its family's budgets, the report.

    ``csv(name)`` and ``log(name)`` are the paths of a result table and of a
    resumable JSON-lines log in the output directory; ``cached(name, compute)``
    loads ``name.csv`` if an earlier run finished it, else computes and saves it;
    ``cached_tables(names, compute)`` does the same for several tables computed together.
    """

    def __init__(self, cfg, model, text: str, report, budget, out: Path):
        self.cfg, self.model, self.text, self.report, self.budget = cfg, model, text, report, budget
        self.out = Path(out)

    def csv(self, name: str) -> Path:
        return self.out / f"{name}.csv"

    def log(self, name: str) -> Path:
        return self.out / "logs" / f"{name}.jsonl"

    def cached(self, name: str, compute: Callable[[], pd.DataFrame]) -> pd.DataFrame:
        return self.cached_tables((name,), lambda: (compute(),))[0]

    def cached_tables(self, names: tuple[str, ...],
                      compute: Callable[[], tuple[pd.DataFrame, ...]]) -> tuple[pd.DataFrame, ...]:
        """``names.csv`` if an earlier run wrote all of them, else ``compute()`` (one table per name), saved."""
        paths = [self.csv(n) for n in names]
        if all(p.exists() for p in paths):
            return tuple(pd.read_csv(p) for p in paths)
        dfs = tuple(compute())
        if len(dfs) != len(names):
            raise ValueError(f"compute returned {len(dfs)} tables for {len(names)} names {list(names)}")
        for df, path in zip(dfs, paths):
            df.to_csv(path, index=False)
        return dfs
