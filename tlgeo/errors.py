"""The user's mistakes, kept apart from bugs.

A :class:`UserError` is something the user can fix (a flag's value, a busy or full output folder, a damaged
cache, a layer the model does not have, a name nobody registered): it is raised where the mistake is found, and
the command line says it in one line and exits with 2 (:func:`tlgeo.cli.main` decides by the error's type
alone). :class:`InputError`, :class:`OutOfRangeError` and :class:`UnknownNameError` are also a
``ValueError``, an ``IndexError`` and a ``KeyError``, so code that catches those keeps working. Every "no such
name" error (a model, a family, a site, a corpus, a task, a method) is an :class:`UnknownNameError`. A
``ValueError``, ``IndexError`` or ``KeyError`` that is not a :class:`UserError` is a bug (or a library's
complaint about how tlgeo called it) and keeps its traceback.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["UserError", "InputError", "OutOfRangeError", "UnknownNameError", "spans"]


class UserError(Exception):
    """An error the user can fix; its message is one line that names what to change."""


class InputError(UserError, ValueError):
    """A value the user gave (a flag, a config field, a file's content, an argument from Python) that tlgeo
    cannot use; the message names it and what would do."""


class OutOfRangeError(UserError, IndexError):
    """An index the user gave (a block, a head, a row) beyond what the model or the data has."""


class UnknownNameError(UserError, KeyError):
    """A name the user gave (a command, a site, a table) that nothing is registered under."""

    def __str__(self) -> str:  # the message itself, not KeyError's repr of it
        return str(self.args[0]) if self.args else ""


def spans(values: Iterable) -> str:
    """Integers as runs, for a message: ``[5, 6, 7, 9]`` -> ``5-7, 9`` (anything else as it is)."""
    vals = list(values)
    if not vals or not all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return ", ".join(map(str, vals))
    vals, out, start = sorted(set(vals)), [], None
    for i, v in enumerate(vals):
        if start is None:
            start = v
        if i + 1 == len(vals) or vals[i + 1] != v + 1:
            out.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(out)
