"""The user's mistakes, kept apart from bugs.

A :class:`UserError` is something the user can fix (a busy or full output folder, a damaged cache,
a bad value): the command line says it in one line and exits with 2. Anything else that escapes a
command is a bug and keeps its traceback.
"""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(Exception):
    """An error the user can fix; its message is one line that names what to change."""
