"""The analysis contract: config → run → typed result, work units, atlas steps.

Every analysis package (``decomposition``, ``dirmag``, ``tokenwise``, ``pdsf``, ...)
implements the same shape:

* ``config.py``: one frozen dataclass subclassing :class:`Config`, the single source
  of the analysis's parameters. Each field is a :func:`param` (default, help text,
  optional ``cost``, ``choices``, ``item``, ``indices``, ``atlas`` default); the CLI
  flags, the atlas budgets (:func:`atlas_budgets`) and the notebook keyword
  arguments are generated from it or passed as it. ``validate()`` checks the values
  once, when the config is made.
* ``analysis.py``: ``run(model, cfg, *, out=None, log=None, units=None) -> Result`` and
  ``units(model, cfg)``, registered with :func:`register_analysis`. The :class:`Result`
  holds named tables (``tables()``), owns their CSV names and keys (:class:`Table`),
  ``save(out)`` merges them into ``out`` by key, ``load(out)`` reads them back, and
  ``merge(parts)`` joins results of disjoint work units: a run over a subset of the
  units followed by a merge equals a run over all of them.
* ``paper.py`` (the seed paper's numbers), ``plots.py``, ``atlas.py`` (its steps),
  ``cli.py`` (its commands: :class:`Command`).

The atlas part: an analysis contributes steps from its ``atlas`` module — one
budgets dataclass registered with :func:`register_chapter` (made from the config by
:func:`atlas_budgets`), one step per registered analysis it runs
(:func:`register_analysis_step`: the analysis, its config from the budgets, and a function that
draws the report section from the result through ``ctx.report``), and optionally a
headline ``fn(out_dir, budgets) -> Headline``. :mod:`tlgeo.report.atlas` runs each step's
analysis as its command does; ``tlgeo atlas`` makes one flag per budget field.

This module holds no model, no report and no argparse code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterable, Mapping, Sequence

import pandas as pd

from ..errors import InputError, UnknownNameError
from .results import IDENTITY, merge_csv, read_table, stamp, wide_floats

__all__ = [
    "Config",
    "param",
    "Table",
    "Result",
    "Analysis",
    "Command",
    "register_analysis",
    "analyses",
    "check_supported",
    "atlas_budgets",
    "Step",
    "StepContext",
    "Headline",
    "budget",
    "register_chapter",
    "register_analysis_step",
    "steps",
    "headlines",
    "chapter_headline",
    "chapter_title",
    "budget_fields",
    "make_budgets",
]


@dataclass(frozen=True)
class Step:
    """One atlas step: a run of the registered ``analysis`` with ``config(budgets)`` (``None``: skipped at
    those budgets), whose report section ``render(ctx, result)`` draws (:func:`register_analysis_step`)."""

    name: str
    chapter: str
    render: Callable[["StepContext", "Result"], None]
    description: str
    analysis: "Analysis"
    config: Callable[[Any], "Config | None"]

    @property
    def files(self) -> tuple[str, ...]:
        """The file names of its tables (``.csv`` or ``.csv.gz``)."""
        return tuple(t.filename for t in self.analysis.result.TABLES)


@dataclass
class Headline:
    """What a chapter's results show, for the top of the report.

    ``sentences``: plain sentences with their numbers, computed from the CSVs
    (the most telling first); ``warnings``: one sentence per budget too small to
    conclude anything from (e.g. "zero-shot: 5 items per task: indication only").
    """

    sentences: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.sentences or self.warnings)


HeadlineFn = Callable[[Path, Any], "Headline | list[str]"]

_CHAPTERS: dict[str, type] = {}
_HEADLINES: dict[str, HeadlineFn] = {}
_TITLES: dict[str, str] = {}
_STEPS: dict[str, Step] = {}


def budget(default: Any, help: str, **meta: Any) -> Any:
    """A budgets-dataclass field: ``default``, a ``help`` text for its flag, and optional
    ``item`` (element type of a tuple or of a ``None`` default), ``choices``, ``flag``
    (the flag's name when it is not ``--<field-name>``), ``cost`` (what the setting's cost grows
    with, in terms of the code's work, e.g. ``"linear: one pass per grid point, resumed at
    --skip-first"``, shown by ``tlgeo atlas --help``; no measured times: ``tlgeo plan`` estimates
    those, the scripts of docs/benchmarks.md measure them)."""
    return dataclasses.field(default=default, metadata={"help": help, **meta})


def register_chapter(name: str, budgets: type, headline: HeadlineFn | None = None, title: str = "") -> None:
    """Register an atlas chapter (an analysis package's part of the report) and its budgets dataclass (field
    names unique across chapters).

    ``headline(out_dir, budgets)``, if given, returns the chapter's :class:`Headline`
    (or a plain list of sentences) computed from the CSVs in ``out_dir``; it must
    cope with steps not yet run (their CSVs missing). ``title``: the chapter's heading in the
    report's headline (default: its name)."""
    if not dataclasses.is_dataclass(budgets):
        raise TypeError(f"budgets of {name!r} must be a dataclass, got {budgets!r}")
    if name in _CHAPTERS and _CHAPTERS[name] is not budgets:
        raise ValueError(f"atlas chapter {name!r} is already registered")
    if headline is not None and not callable(headline):
        raise TypeError(f"headline of {name!r} must be a function (out_dir, budgets) -> Headline, got {headline!r}")
    old = _HEADLINES.get(name)
    if headline is not None and old is not None and old.__qualname__ != headline.__qualname__:
        raise ValueError(f"atlas chapter {name!r} already has a headline ({old.__qualname__})")
    taken = {f: chap for f, (chap, _) in budget_fields().items() if chap != name}
    clash = sorted(f.name for f in dataclasses.fields(budgets) if f.name in taken)
    if clash:
        raise ValueError(f"budget name(s) {clash} of {name!r} are already used by {taken[clash[0]]!r}")
    _CHAPTERS[name] = budgets
    _TITLES[name] = title or _TITLES.get(name, name)
    if headline is not None:
        _HEADLINES[name] = headline


def register_analysis_step(
    name: str, chapter: str, analysis: "Analysis", config: Callable[[Any], "Config | None"], description: str
):
    """Decorator: register ``render(ctx, result)`` as atlas step ``name`` of a registered ``chapter``: a run
    of the registered ``analysis`` with ``config(budgets)`` (``None``: skipped at those budgets). The atlas
    calls :func:`tlgeo.runner.distributed.run_analysis` on it into its folder, as the analysis's command does (the
    same tables, resumed from the same logs; under torchrun its units are shared out over the ranks),
    then ``render`` draws the report section from the result."""
    if chapter not in _CHAPTERS:
        raise ValueError(f"register the chapter {chapter!r} before its steps")

    def wrap(render: Callable[[StepContext, Result], None]) -> Callable[[StepContext, Result], None]:
        old = _STEPS.get(name)
        if old is not None and old.render.__qualname__ != render.__qualname__:
            raise ValueError(f"atlas step {name!r} is already registered by {old.chapter!r}")
        _STEPS[name] = Step(name, chapter, render, description, analysis, config)
        return render

    return wrap


def steps() -> dict[str, Step]:
    """The registered steps, in registration order."""
    return dict(_STEPS)


def chapter_title(chapter: str) -> str:
    """A chapter's heading in the report's headline."""
    return _TITLES.get(chapter, chapter)


def headlines() -> dict[str, HeadlineFn]:
    """The chapters' headline functions, by chapter, in registration order."""
    return {chap: _HEADLINES[chap] for chap in _CHAPTERS if chap in _HEADLINES}


def chapter_headline(chapter: str, out: Path, budgets: Any) -> Headline:
    """``chapter``'s :class:`Headline` for the results in ``out`` (empty if it has none)."""
    fn = _HEADLINES.get(chapter)
    if fn is None:
        return Headline()
    got = fn(Path(out), budgets)
    if isinstance(got, Headline):
        return got
    if isinstance(got, (list, tuple)) and all(isinstance(x, str) for x in got):
        return Headline(list(got))
    raise TypeError(f"headline of {chapter!r} must return a Headline or a list of str, got {type(got).__name__}")


def budget_fields() -> dict[str, tuple[str, dataclasses.Field]]:
    """Every budget field by name: ``(chapter, field)``."""
    return {f.name: (chap, f) for chap, cls in _CHAPTERS.items() for f in dataclasses.fields(cls)}


def make_budgets(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """One budgets instance per chapter: defaults, with ``overrides`` (by field name) applied."""
    fields = budget_fields()
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise InputError(f"unknown atlas budget(s) {unknown}; known: {sorted(fields)}")
    per_chapter: dict[str, dict[str, Any]] = {chap: {} for chap in _CHAPTERS}
    for k, v in overrides.items():
        per_chapter[fields[k][0]][k] = v
    return {chap: cls(**per_chapter[chap]) for chap, cls in _CHAPTERS.items()}


class StepContext:
    """What a step's ``render`` gets: the atlas run's config, its chapter's budgets, the report,
    ``config``, the analysis config the step ran, and ``number``, its sections' number (the report numbers
    them: titles carry none). No model: a section draws what its result holds (a
    view that needs a forward is computed by the analysis's run and kept in a table)."""

    def __init__(self, cfg, report, budget, config: "Config | None" = None, number: int | None = None):
        self.cfg, self.report, self.budget, self.config, self.number = cfg, report, budget, config, number


# ---------------------------------------------------------------------------
# the analysis contract: config -> run -> result, work units
# ---------------------------------------------------------------------------


def param(default: Any, help: str, **meta: Any) -> Any:
    """A config field: ``default`` and the ``help`` text of its flag. Optional metadata:
    ``item`` (element type of a tuple, or of a ``None`` default), ``choices``, ``indices``
    (a list of block/head indices, ``3,5,10-12`` on the command line), ``min`` (smallest
    int, default 1; 0 where 0 means "all" or "skip"), ``cost`` (what the setting's cost grows with,
    e.g. ``"n_heads + 1 resumed forwards per block"``: no times), ``atlas`` (its default as an atlas
    budget, where that differs), ``cli=False`` (no flag: set by the command itself), ``type`` (the flag's own argparse
    type), ``required`` (a flag that must be given), ``flag`` (its name when not ``--<field-name>``),
    ``group`` (the title of the ``--help`` section its flag is listed in), ``accepts`` (a type whose
    instances are accepted beside ``choices``: in Python, not on the command line)."""
    return dataclasses.field(default=default, metadata={"help": help, **meta})


def _mutable_default(v: Any) -> Any:
    return dataclasses.field(default_factory=lambda: v) if isinstance(v, (list, dict, set)) else v


@dataclass(frozen=True)
class Config:
    """Base of every analysis config: a frozen dataclass of :func:`param` fields, checked once.

    Subclasses override :meth:`validate` (raise ``ValueError`` naming the field and the
    accepted values); lists given for tuple fields are stored as tuples."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, list):
                object.__setattr__(self, f.name, tuple(v))
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` on a bad value (the message names the field)."""

    def check_shape(self, shape: Any) -> None:
        """Raise (one line naming the field) on a value the model's shape rules out (``shape``: its
        :class:`tlgeo.planner.ModelShape`, read from its config before any weights load: a block index out of
        range). Every command calls it before the model loads (:func:`tlgeo.runner.distributed.check_before_loading`);
        the run checks again on the model."""

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)

    def settings(self) -> dict[str, Any]:
        """The fields as a plain dict (tuples as lists), for a result row or a log key."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in dataclasses.fields(self)
        }

    def _check_choices(self) -> None:
        """Every field with ``choices`` (or tuple items with ``choices``) holds allowed values."""
        for f in dataclasses.fields(self):
            choices, accepts = f.metadata.get("choices"), f.metadata.get("accepts", ())
            v = getattr(self, f.name)
            if choices is None or v is None:
                continue
            bad = [x for x in (v if isinstance(v, tuple) else (v,)) if not isinstance(x, accepts) and x not in choices]
            if bad:
                raise InputError(f"{f.name}: unknown value(s) {bad}; choose from {tuple(choices)}")


@dataclass(frozen=True)
class Table:
    """One table of a result: its CSV file name (``.csv`` or ``.csv.gz``), the columns that
    identify a row (settings and unit), and ``volatile`` columns (timings) that differ between
    two runs of the same work. Every row also carries the model's identity
    (:data:`tlgeo.runner.results.IDENTITY`), which leads its :attr:`row_key`. ``derive``: a table computed
    from the result's other tables (``derive(result)``, e.g. means over seeds), made whenever the
    result is made or merged without it, so that a number quoted from it is in a saved table. ``whole``: what is
    computed again over the whole saved table after each merge (``whole(df) -> df``, e.g. a q-value over a family
    whose rows several runs wrote), in the same atomic write."""

    name: str
    key: tuple[str, ...]
    file: str = ""
    volatile: tuple[str, ...] = ()
    derive: Callable[["Result"], "pd.DataFrame | None"] | None = None
    whole: Callable[["pd.DataFrame"], "pd.DataFrame"] | None = None

    @property
    def filename(self) -> str:
        return self.file or f"{self.name}.csv"

    @property
    def row_key(self) -> tuple[str, ...]:
        """The identity columns, then :attr:`key`: what tells two rows apart in a saved table."""
        return tuple(dict.fromkeys((*IDENTITY, *self.key)))


class Result:
    """A typed result: named DataFrames (:meth:`tables`) whose names, files and keys are the
    class's :attr:`TABLES`. Subclasses are dataclasses; each table not declared as a field
    becomes one (``pd.DataFrame | None = None``, ``None`` for a part not run), so a subclass
    states its ``TABLES`` (and any other field) and ``load`` and ``merge`` need no code."""

    TABLES: ClassVar[tuple[Table, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__annotations__" not in cls.__dict__:
            cls.__annotations__ = {}
        fields = cls.__dict__["__annotations__"]
        for t in cls.__dict__.get("TABLES", ()):
            if t.name not in fields:  # one optional DataFrame field per table, before @dataclass runs
                fields[t.name] = "pd.DataFrame | None"
                setattr(cls, t.name, None)

    def __post_init__(self) -> None:
        for t in self.TABLES:  # numbers as a rerun reads them back (float32 columns as float64)
            df = getattr(self, t.name, None)
            if df is not None:
                setattr(self, t.name, wide_floats(df))
        for t in self.TABLES:  # derived tables from the others, unless given (e.g. read back from a CSV)
            if t.derive is not None and getattr(self, t.name, None) is None:
                setattr(self, t.name, t.derive(self))

    def tables(self) -> dict[str, pd.DataFrame]:
        """The tables that were computed, by name."""
        return {t.name: df for t in self.TABLES if (df := getattr(self, t.name, None)) is not None}

    def stamp(self, identity: Mapping[str, Any] | None) -> "Result":
        """Every table with the ``identity`` columns first (in place; returns ``self``)."""
        for t in self.TABLES:
            df = getattr(self, t.name, None)
            if df is not None:
                setattr(self, t.name, stamp(df, identity))
        return self

    def drop_stale(self, out: Path) -> None:
        """Before this result is merged into ``out``: remove rows of ``out`` that it makes stale (none by
        default; e.g. the rows of a task that a patching run found not patched)."""

    def save(self, out: str | Path, identity: Mapping[str, Any] | None = None) -> list[Path]:
        """Merge each table into ``out/<file>`` by its row key (rows of other settings or of another
        model's identity are kept; :meth:`drop_stale` first; each :attr:`Table.whole` computed again over the
        merged file), stamped with ``identity`` first where given (the model's :data:`IDENTITY` columns). Returns
        the files written. A run finishes its tables with :meth:`deliver`, the one way they reach the disk."""
        out = Path(out)
        if identity is not None:
            self.stamp(identity)
        self.drop_stale(out)
        written = []
        for t in self.TABLES:
            df = getattr(self, t.name, None)
            if df is None:
                continue
            merge_csv(out / t.filename, df, [k for k in t.row_key if k in df.columns], whole=t.whole)
            written.append(out / t.filename)
        return written

    def deliver(
        self,
        out: str | Path | None = None,
        on_table: Callable[[str, pd.DataFrame], Any] | None = None,
        *,
        identity: Mapping[str, Any] | None,
    ) -> "Result":
        """A finished result (or a finished part of one: the tables it holds), stamped with ``identity`` (the run's
        model, :func:`tlgeo.runner.identity.run_identity`, passed by the run; ``None``: tables that carry it
        already), saved into ``out`` (if given, :meth:`save`), then each table shown with ``on_table(name, df)``
        (the command line prints them); returns ``self``. The one way an analysis finishes a table
        (``tests/test_one_save_path.py``)."""
        if identity is not None:
            self.stamp(identity)
        if out is not None:
            self.save(out)
        if on_table is not None:
            for name, df in self.tables().items():
                on_table(name, df)
        return self

    @classmethod
    def load(cls, out: str | Path) -> "Result":
        """The tables saved in ``out`` (missing ones as ``None``)."""
        out = Path(out)
        return cls(
            **{t.name: read_table(out / t.filename) if (out / t.filename).exists() else None for t in cls.TABLES}
        )

    @classmethod
    def merge(cls, parts: Sequence["Result"]) -> "Result":
        """One result from the results of disjoint work units: each table concatenated, a
        row repeated in several parts (same key) kept once."""
        if not parts:
            raise ValueError("nothing to merge")
        tables = {}
        for t in cls.TABLES:
            if t.derive is not None:  # made again from the merged tables
                tables[t.name] = None
                continue
            dfs = [df for p in parts if (df := getattr(p, t.name, None)) is not None]
            if not dfs:
                tables[t.name] = None
                continue
            df = pd.concat(dfs, ignore_index=True).infer_objects()  # a part's all-None column: numbers again
            key = [k for k in t.row_key if k in df.columns]
            if key:
                df = df[~df[key].astype(str).duplicated(keep="last")].reset_index(drop=True)
            tables[t.name] = df
        return cls(**tables)

    @classmethod
    def table(cls, name: str) -> Table:
        for t in cls.TABLES:
            if t.name == name:
                return t
        raise UnknownNameError(f"{cls.__name__} has no table {name!r}; tables: {[t.name for t in cls.TABLES]}")


@dataclass(frozen=True)
class Analysis:
    """One registered analysis: its config class, ``run(model, cfg, *, out, log, units)``,
    its result class and ``units(model, cfg)`` (the independent work units a run can be
    split into; ``run(..., units=subset)`` does only those). ``tiny``: the config keyword
    arguments of a run of a few seconds on a tiny random model (the contract test's, and a
    first try in a notebook). ``cost(model, cfg, unit)``: a unit's relative run time, by which a
    data-parallel run shares the units out (:func:`tlgeo.runner.distributed.deal`). ``plan(shape, cfg)``:
    its steps as :class:`tlgeo.planner.Work` from the model's shape alone (``tlgeo plan``).

    The record is all a new analysis registers: its ``tlgeo`` command (unless its package's ``cli``
    module defines one), its atlas step (with ``render``, unless its package's ``atlas`` module registers
    one), its support-matrix column (with ``support``), its line in the docs' list of analyses and the
    contract tests are derived from it (:mod:`tlgeo.report.registry`)."""

    name: str
    config: type
    run: Callable[..., Result]
    result: type
    units: Callable[[Any, Any], list]
    description: str
    tiny: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # config of a seconds-long run on a tiny model
    command: str = ""  # its tlgeo subcommand (default: the name)
    cost: Callable[[Any, Any, Any], float] | None = None  # cost(model, cfg, unit): relative run time (default 1 each)
    plan: Callable[[Any, Any], list] | None = None  # plan(shape, cfg): its steps as planner Work (tlgeo plan)
    # what the rest of tlgeo derives from the record (:mod:`tlgeo.report.registry`), where no module says otherwise:
    render: Callable[["StepContext", Result], None] | None = None  # its atlas section (a step of its own chapter)
    headline: HeadlineFn | None = None  # its chapter's headline in the atlas, from the result folder
    title: str = ""  # the section's and the chapter's title (default: the description)
    support: Callable[[Any], Any] | None = None  # support(family) -> tlgeo.families.Support: its support-matrix column
    docs: str = ""  # its page in the docs (e.g. "analyses/dirmag"), listed in the docs' analyses table of contents

    @property
    def command_name(self) -> str:
        return self.command or self.name


@dataclass(frozen=True)
class Command:
    """One ``tlgeo`` subcommand: ``add_args(parser)`` and ``run(args) -> exit code``."""

    name: str
    help: str
    add_args: Callable[[Any], None]
    run: Callable[[Any], int]
    description: str = ""


_ANALYSES: dict[str, Analysis] = {}


def register_analysis(analysis: Analysis) -> Analysis:
    """Register an analysis by name (re-registering the same one is a no-op)."""
    old = _ANALYSES.get(analysis.name)
    if old is not None and old.run.__qualname__ != analysis.run.__qualname__:
        raise ValueError(f"analysis {analysis.name!r} is already registered")
    if not (dataclasses.is_dataclass(analysis.config) and issubclass(analysis.config, Config)):
        raise TypeError(f"the config of {analysis.name!r} must be a Config dataclass, got {analysis.config!r}")
    if not getattr(analysis.run, "identified", False):
        raise TypeError(
            f"the run of {analysis.name!r} must be decorated with tlgeo.runner.identity.identified "
            "(which checks the model's support and stamps its identity)"
        )
    if analysis.support is not None and analysis.name not in _ANALYSES:
        from ..families import register_support

        register_support(analysis.name, analysis.support)
    _ANALYSES[analysis.name] = analysis
    analysis.config.tlgeo_command = analysis.command_name  # what a run from Python records as its command line
    return analysis


def analyses() -> dict[str, Analysis]:
    """The registered analyses, in registration order."""
    return dict(_ANALYSES)


def check_supported(run: Callable[..., Any], model: Any) -> None:
    """Raise :class:`tlgeo.families.UnsupportedError` (one line, the reason) if ``model``'s family refuses the
    registered analysis whose ``run`` this is (its record's ``support``, or the family's own cell). The one
    support check of every analysis, built-in or plug-in: :func:`tlgeo.runner.identity.identified` makes it
    before any work, however the run was called (command line, atlas, torchrun, Python)."""
    for a in _ANALYSES.values():
        if a.run is run and a.support is not None:
            from ..families import check_support

            check_support(model, a.name)


def atlas_budgets(
    config: type,
    prefix: str,
    fields: Iterable[str],
    rename: Mapping[str, str] | None = None,
    flags: Mapping[str, str] | None = None,
    **defaults: Any,
) -> type:
    """An atlas budgets dataclass made from ``config``'s ``fields``: each becomes the budget
    ``<prefix><field>`` (``<prefix><rename[field]>`` where given) with the field's help text,
    cost and choices, and as its default the
    ``defaults`` given here, else the field's ``atlas`` default, else its own; its flag is
    ``--<budget-name>``, or ``flags[field]``. The class's
    ``config(**fixed)`` gives back the analysis config with those values (and ``fixed``)."""
    fields = list(fields)
    known = {f.name: f for f in dataclasses.fields(config)}
    bad = [f for f in [*fields, *defaults] if f not in known]
    if bad:
        raise InputError(f"{config.__name__} has no field(s) {bad}")
    rename = dict(rename or {})
    flag = {n: prefix + rename.get(n, n) for n in fields}
    spec = []
    for name in fields:
        f = known[name]
        meta = dict(f.metadata)
        meta.pop("flag", None)  # the budget's flag is --<prefix><name>, unless flags names another
        if name in (flags or {}):
            meta["flag"] = flags[name]
        default = defaults.get(name, meta.pop("atlas", f.default))
        spec.append((flag[name], f.type, budget(_mutable_default(default), meta.pop("help", ""), **meta)))

    def to_config(self, **fixed: Any):
        return config(**{n: getattr(self, flag[n]) for n in fields}, **fixed)

    cls = dataclasses.make_dataclass(
        f"{config.__name__.removesuffix('Config')}Budgets",
        spec,
        namespace={"config": to_config, "__module__": config.__module__},
    )
    cls.__doc__ = f"Atlas budgets of {config.__name__}: " + ", ".join(prefix + n for n in fields)
    return cls
