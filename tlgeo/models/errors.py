"""The one error of model loading: a name that is no model tlgeo can load."""

from __future__ import annotations

from ..errors import UnknownNameError

__all__ = ["UnknownModelError"]


class UnknownModelError(UnknownNameError, ValueError):
    """A model name that is neither embedded, a local directory, nor loadable from the hub."""
