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
)


def load_steps() -> dict[str, pipeline.Step]:
    """Import every contributing module and return the registered steps, in order."""
    for module in ANALYSES:
        importlib.import_module(module)
    return pipeline.steps()
