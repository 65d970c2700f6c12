"""The analysis packages, in report order: one line each, and what is derived from their records.

A package may have an ``analysis`` module (its ``run`` / config / result, registered with
:func:`tlgeo.runner.analysis.register_analysis`), an ``atlas`` module (its steps of ``tlgeo atlas``)
and a ``cli`` module (its ``tlgeo`` subcommands, ``COMMANDS``). A package outside tlgeo (a lab's
own analysis) is named in ``$TLGEO_ANALYSES`` (comma-separated importable packages) and comes after
:data:`ANALYSES`. From each registered :class:`~tlgeo.runner.analysis.Analysis` record, where its package
has no module saying otherwise: its command (:func:`analysis_command`), its atlas chapter and step
(with ``render``), its support-matrix column (with ``support``) and its line in the docs
(:func:`analyses_markdown`); the contract tests run over :func:`load_analyses`.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os

from ..errors import UnknownNameError
from ..runner import analysis

__all__ = [
    "ANALYSES",
    "PLUGINS_ENV",
    "packages",
    "load_steps",
    "load_analyses",
    "load_commands",
    "command_named",
    "analysis_command",
    "analyses_markdown",
    "support_columns",
]

ANALYSES: tuple[str, ...] = (
    "tlgeo.decomposition",
    "tlgeo.dirmag",
    "tlgeo.tokenwise",
    "tlgeo.pdsf",
    "tlgeo.patching",
    "tlgeo.circuits",  # builds on patching's tasks: it sits above the analyses, beside geometries
    "tlgeo.compression",
    "tlgeo.train",
    "tlgeo.geometries",  # reads the four analyses above: it closes the report
)
REPORT_COMMANDS = (
    "tlgeo.report.cli",
    "tlgeo.report.plan",
)  # tlgeo atlas (every package's steps, one report), tlgeo plan
PLUGINS_ENV = "TLGEO_ANALYSES"


def packages() -> tuple[str, ...]:
    """:data:`ANALYSES`, then the packages named in ``$TLGEO_ANALYSES``, in report order."""
    extra = [p.strip() for p in os.environ.get(PLUGINS_ENV, "").split(",") if p.strip()]
    return ANALYSES + tuple(dict.fromkeys(p for p in extra if p not in ANALYSES))


def _modules(role: str) -> list:
    out = []
    for pkg in packages():
        name = f"{pkg}.{role}"
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            raise UnknownNameError(
                f"${PLUGINS_ENV} names {pkg!r}, which is not an importable package (is its folder on PYTHONPATH?)"
            ) from None
        if found:
            out.append(importlib.import_module(name))
    return out


def _rank(module: str) -> int:
    """The report position of the package ``module`` belongs to (after every package if none)."""
    pkgs = packages()
    for i, pkg in enumerate(pkgs):
        if module == pkg or module.startswith(pkg + "."):
            return i
    return len(pkgs)


def load_steps() -> dict[str, analysis.Step]:
    """Import every package's ``atlas`` module, derive a step for each analysis with a ``render`` and no step of
    its own (:func:`_derive_step`), and return the steps in report order: by the position of their package,
    then as each module registered them."""
    _modules("atlas")
    stepped = {s.analysis.name for s in analysis.steps().values()}
    for a in load_analyses().values():
        if a.render is not None and a.name not in stepped:
            _derive_step(a)
    steps = list(analysis.steps().items())
    steps.sort(key=lambda kv: _rank(kv[1].render.__module__))  # stable: keeps each module's order
    return dict(steps)


def _derive_step(a: analysis.Analysis) -> None:
    """``a``'s atlas chapter (its name; one budget ``<name>_<field>`` per config field) and its one step: a run
    with those budgets whose section is its title and what ``a.render`` draws."""
    fields = [f.name for f in dataclasses.fields(a.config)]
    budgets = analysis.atlas_budgets(a.config, f"{a.name}_", fields)
    title = a.title or a.description
    analysis.register_chapter(a.name, budgets, a.headline, title)
    render = a.render

    def section(ctx: analysis.StepContext, result: analysis.Result) -> None:
        ctx.report.section(title)
        render(ctx, result)

    section.__module__, section.__qualname__ = render.__module__, f"{render.__qualname__}.section"
    analysis.register_analysis_step(a.name, a.name, a, lambda b: b.config(), title)(section)


def load_analyses() -> dict[str, analysis.Analysis]:
    """Import every package's ``analysis`` module; the registered analyses by name, in report order (by the
    position of their package, then as each registered them), whatever imported first."""
    _modules("analysis")
    found = list(analysis.analyses().items())
    found.sort(key=lambda kv: _rank(kv[1].run.__module__))
    return dict(found)


def support_columns() -> tuple[str, ...]:
    """The support matrix's columns: the sites, then the column of every analysis that registered a rule
    (:func:`load_analyses`), in report order (by the package of its rule), whatever imported first."""
    from ..families import SITE_COLUMNS, columns, support_rule

    load_analyses()
    own = [c for c in columns() if c not in SITE_COLUMNS]
    own.sort(key=lambda c: _rank(getattr(support_rule(c), "__module__", "") or ""))  # stable: registration order
    return SITE_COLUMNS + tuple(own)


def load_commands() -> dict[str, analysis.Command]:
    """Every package's ``tlgeo`` subcommands (``cli.COMMANDS``), the derived command of each analysis that has
    none there (:func:`analysis_command`), then ``tlgeo atlas`` and ``tlgeo plan``, by name."""
    mods = _modules("cli") + [importlib.import_module(m) for m in REPORT_COMMANDS]
    out: dict[str, analysis.Command] = {}

    def add(c: analysis.Command, where: str) -> None:
        if c.name in out:
            raise ValueError(f"command {c.name!r} is defined twice ({where})")
        out[c.name] = c

    for m in mods[: len(mods) - len(REPORT_COMMANDS)]:
        for c in getattr(m, "COMMANDS", ()):
            add(c, m.__name__)
    named = set(out)
    for a in load_analyses().values():
        if a.command_name not in named:
            add(analysis_command(a), a.run.__module__)
            named.add(a.command_name)
    for m in mods[len(mods) - len(REPORT_COMMANDS) :]:
        for c in getattr(m, "COMMANDS", ()):
            add(c, m.__name__)
    return out


def analysis_command(a: analysis.Analysis) -> analysis.Command:
    """``tlgeo <a.command_name>`` from the record: the model flags, one flag per config field, ``--out`` and
    ``--threads``; runs the analysis as every command does (resumable, provenance, progress; shared out under
    torchrun), prints each table's first rows and the files written."""
    from ..runner import cliargs

    def add_args(p) -> None:
        cliargs.LoadConfig.add_args(p)
        cliargs.add_config_args(p, a.config)
        cliargs.add_out_arg(p, f"runs/{a.command_name}-<model>")

    def run(args) -> int:
        from ..runner.distributed import run_command
        from ..runner.results import IDENTITY

        res, _, out = run_command(a, args, out_name=f"{a.command_name}-" + cliargs.model_key(args.model))
        if res is None:  # a torchrun rank other than 0: rank 0 writes
            return 0
        for name, df in res.tables().items():
            print(f"\n{name} ({len(df)} rows):")
            print(df.drop(columns=[c for c in IDENTITY if c in df.columns]).head(10).to_string(index=False))
        cliargs.print_written([out / a.result.table(n).filename for n in res.tables()])
        return 0

    return analysis.Command(a.command_name, a.description, add_args, run, a.description)


def analyses_markdown() -> str:
    """The docs' list of analyses (``docs/_generated/analyses.md``), from the records: one row each (command,
    what it computes, its tables, its page), then the table of contents of their pages."""
    rows = ["| analysis | command | what it computes | tables |", "|---|---|---|---|"]
    pages: list[str] = []
    for a in load_analyses().values():
        name = f"[{a.name}](../{a.docs}.md)" if a.docs else a.name  # the page sits in docs/_generated/
        tables = ", ".join(f"`{t.filename}`" for t in a.result.TABLES)
        rows.append(f"| {name} | `tlgeo {a.command_name}` | {a.description} | {tables} |")
        if a.docs and a.docs not in pages:
            pages.append(a.docs)
    toc = ["```{toctree}", ":maxdepth: 1", "", *(f"/{p}" for p in pages), "```"]
    return "\n".join(
        [
            "# The analyses",
            "",
            "Every registered analysis, from its record (`tlgeo.runner.analysis.Analysis`).",
            "",
            *rows,
            "",
            *toc,
            "",
        ]
    )


def command_named(name: str) -> analysis.Command:
    """The command ``tlgeo <name>`` runs."""
    cmds = load_commands()
    found = cmds.get(name)
    if found is None:
        raise UnknownNameError(f"no command {name!r}; choose from {sorted(cmds)}")
    return found
