"""Which analysis packages contribute atlas steps, in report order.

Each module listed here registers its family and steps with
:mod:`tlgeo.pipeline` when imported. A new analysis adds its ``atlas`` module
to :data:`ANALYSES`; nothing else in the report changes.
"""

from __future__ import annotations

import importlib

from .. import pipeline

__all__ = ["ANALYSES", "load_steps"]

ANALYSES: tuple[str, ...] = (
    "tlgeo.decomposition.atlas",
    "tlgeo.dirmag.atlas",
    "tlgeo.tokenwise.atlas",
    "tlgeo.pdsf.atlas",
)


def load_steps() -> dict[str, pipeline.Step]:
    """Import every contributing module and return the registered steps in report order:
    by the position of their module in :data:`ANALYSES`, then as each module registered
    them (whatever order the modules happened to be imported in)."""
    for module in ANALYSES:
        importlib.import_module(module)
    rank = {m: i for i, m in enumerate(ANALYSES)}
    steps = list(pipeline.steps().items())
    steps.sort(key=lambda kv: rank.get(kv[1].run.__module__, len(rank)))  # stable: keeps each module's order
    return dict(steps)
