"""No function over 80 lines (``def`` to its last line) in the package, the scripts and the claim checks."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 80


def long_functions(source: str, name: str = "<string>") -> list[str]:
    """``name:line function (n lines)`` for each function of ``source`` over :data:`LIMIT` lines."""
    return [
        f"{name}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for n in ast.walk(ast.parse(source))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > LIMIT
    ]


def test_no_function_is_over_80_lines():
    found = [
        f
        for folder in ("tlgeo", "scripts", "results")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for f in long_functions(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not found, f"split these: {found}"


def test_the_check_counts_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    assert long_functions(f"def f():\n{body}\n") == ["<string>:1 f (81 lines)"]
    assert long_functions(f"def f():\n{body[: body.rindex(chr(10))]}\n") == []
