"""Modifier classes built on first use, so that importing tlgeo does not import llmcompressor."""

from __future__ import annotations

from typing import Callable


def lazy_classes(namespace: dict, **factories: Callable[[], type]) -> Callable[[str], type]:
    """A module ``__getattr__`` that builds ``name`` with ``factories[name]()`` once and caches
    it in the module's ``namespace``."""

    def __getattr__(name: str) -> type:
        if name in factories:
            cls = factories[name]()
            namespace[name] = cls
            return cls
        raise AttributeError(name)

    return __getattr__
