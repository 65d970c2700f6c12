"""The one intervention protocol: anything that acts on a model through TransformerLens hooks.

As pyvene's single base class, kept apart from where it is applied: an :class:`Intervention`
only says which ``(hook name, hook function)`` pairs it needs for a model. :class:`~.edits.Edit`,
:class:`~.perturb.Perturbation`, :class:`~.subspace.SubspaceEdit` and
:class:`~.subspace.ComplementEdit` implement it; :func:`intervene` applies any number of them
for a ``with`` block and removes their hooks on exit or error.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Protocol, runtime_checkable

from ..models import Model
from .adapter import HookList

__all__ = ["Intervention", "intervene", "hooks_of"]


@runtime_checkable
class Intervention(Protocol):
    """Something applied to a model as forward hooks."""

    def hooks(self, model: Model) -> HookList:
        """``[(hook name, fn(tensor, hook))]`` for ``run_with_hooks`` / ``model.hooks``."""
        ...


def hooks_of(model: Model, *interventions: Intervention) -> HookList:
    """The hooks of all ``interventions``, in order (each checked to be an :class:`Intervention`)."""
    bad = [type(i).__name__ for i in interventions if not isinstance(i, Intervention)]
    if bad:
        raise TypeError(f"not an intervention (no .hooks(model)): {bad}")
    return [h for i in interventions for h in i.hooks(model)]


@contextmanager
def intervene(model: Model, *interventions: Intervention) -> Iterator[Model]:
    """Apply ``interventions`` for the duration of a ``with`` block; hooks are removed on exit or error."""
    with model.hooks(fwd_hooks=hooks_of(model, *interventions)):
        yield model
