"""The analysis packages, in report order: one line each.

A package may have an ``analysis`` module (its ``run`` / config / result, registered with
:func:`tlgeo.analysis.register_analysis`), an ``atlas`` module (its steps of ``tlgeo atlas``)
and a ``cli`` module (its ``tlgeo`` subcommands, ``COMMANDS``). A new analysis adds its
package to :data:`ANALYSES`; nothing else in the report or the command line changes.
"""

from __future__ import annotations

import importlib
import importlib.util

from ..errors import UnknownNameError
from .. import analysis

__all__ = ["ANALYSES", "load_steps", "load_analyses", "load_commands", "command_named"]

ANALYSES: tuple[str, ...] = (
    "tlgeo.decomposition",
    "tlgeo.dirmag",
    "tlgeo.tokenwise",
    "tlgeo.pdsf",
    "tlgeo.patching",
    "tlgeo.compression",
    "tlgeo.train",
    "tlgeo.four_geometries",  # reads the four analyses above: it closes the report
)
REPORT_COMMANDS = ("tlgeo.report.cli", "tlgeo.report.plan")  # tlgeo atlas (every package's steps, one report), tlgeo plan


def _modules(role: str) -> list:
    out = []
    for pkg in ANALYSES:
        name = f"{pkg}.{role}"
        if importlib.util.find_spec(name) is not None:
            out.append(importlib.import_module(name))
    return out


def load_steps() -> dict[str, analysis.Step]:
    """Import every package's ``atlas`` module and return the registered steps in report order:
    by the position of their package in :data:`ANALYSES`, then as each module registered them."""
    mods = _modules("atlas")
    rank = {m.__name__: i for i, m in enumerate(mods)}
    steps = list(analysis.steps().items())
    steps.sort(key=lambda kv: rank.get(kv[1].render.__module__, len(rank)))  # stable: keeps each module's order
    return dict(steps)


def load_analyses() -> dict[str, analysis.Analysis]:
    """Import every package's ``analysis`` module; the registered analyses by name, in report order (by the
    position of their package in :data:`ANALYSES`, then as each registered them), whatever imported first."""
    _modules("analysis")
    rank = {pkg: i for i, pkg in enumerate(ANALYSES)}
    found = list(analysis.analyses().items())
    found.sort(key=lambda kv: rank.get(kv[1].run.__module__.rsplit(".", 1)[0], len(rank)))
    return dict(found)


def load_commands() -> dict[str, analysis.Command]:
    """Every package's ``tlgeo`` subcommands (``cli.COMMANDS``), then ``tlgeo atlas`` and ``tlgeo plan``, by name."""
    mods = _modules("cli") + [importlib.import_module(m) for m in REPORT_COMMANDS]
    out: dict[str, analysis.Command] = {}
    for m in mods:
        for c in getattr(m, "COMMANDS", ()):
            taken = [n for n in (c.name, *c.aliases) if n in out or any(n in o.aliases for o in out.values())]
            if taken:
                raise ValueError(f"command {taken[0]!r} is defined twice ({m.__name__})")
            out[c.name] = c
    return out


def command_named(name: str) -> analysis.Command:
    """The command ``tlgeo <name>`` runs: by its name or one of its former names (``run``: ``decompose``)."""
    cmds = load_commands()
    found = cmds.get(name) or next((c for c in cmds.values() if name in c.aliases), None)
    if found is None:
        raise UnknownNameError(f"no command {name!r}; choose from {sorted(cmds)}")
    return found
