"""Sphinx configuration of tlgeo's documentation (MyST Markdown; built by ``tests/test_docs.py``).

The CLI reference and the support matrix are generated from the code at build time
(:func:`generate`), so they cannot drift from it."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

project = "tlgeo"
author = "the tlgeo developers"
copyright = "the tlgeo developers (MIT licence)"
extensions = ["myst_parser", "sphinx.ext.autodoc"]
autodoc_typehints = "none"  # the signatures show them; jaxtyping annotations make no links
autodoc_member_order = "bysource"
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "README.md"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
html_theme = "furo"
html_title = "tlgeo"


def generate() -> None:
    """Write ``_generated/cli.md`` (every command's ``--help``), ``_generated/support.md`` (the support
    matrix: families x sites and analyses) and ``_generated/analyses.md`` (every analysis's record, and the
    table of contents of their pages)."""
    import os

    from tlgeo.cli import build_parser
    from tlgeo.families import markdown_table
    from tlgeo.report.registry import support_columns

    out = HERE / "_generated"
    out.mkdir(exist_ok=True)
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "cmd")
    lines = [
        "# Command-line reference",
        "",
        "Every command's `--help`, generated from the code when the docs are built.",
        "",
    ]
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps help at the terminal's width: the same page everywhere
    try:
        helps = {}
        for name, p in sorted(sub.choices.items()):  # by name: the registry's order follows import order
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                p.print_help()
            helps[name] = buf.getvalue()
    finally:
        if columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = columns
    for name, text in helps.items():
        lines += [f"## `tlgeo {name}`", "", "```text", text.rstrip(), "```", ""]
    (out / "cli.md").write_text("\n".join(lines))
    md = [
        "# Support matrix",
        "",
        "Which sites and analyses run on which architecture family, generated from `tlgeo.families` when the "
        "docs are built (`tlgeo models --support FAMILY` gives the reasons). `yes*`: supported with a documented "
        "difference; `no`: refused.",
        "",
        markdown_table(support_columns()),
    ]
    (out / "support.md").write_text("\n".join(md) + "\n")
    from tlgeo.report.registry import analyses_markdown

    (out / "analyses.md").write_text(analyses_markdown())
    (out / "api.md").write_text(api_markdown())


def api_markdown() -> str:
    """The API reference: the package's public names (``tlgeo.__all__``), the analysis contract, and each
    registered analysis's config, run and result (from its record), documented from their docstrings."""
    import tlgeo
    from tlgeo.report.registry import load_analyses

    def rst(kind: str, target: str, **options: str) -> list[str]:
        return [
            "```{eval-rst}",
            f".. auto{kind}:: {target}",
            *(f"   :{k}:{' ' + v if v else ''}" for k, v in options.items()),
            "```",
            "",
        ]

    lines = [
        "# API reference",
        "",
        "Generated from the docstrings when the docs are built: the names `import tlgeo` gives, the analysis "
        "contract every analysis follows (`tlgeo.runner.analysis`), and each registered analysis's config, run and "
        "typed result, from its record.",
        "",
        "## `tlgeo`",
        "",
    ]
    for name in sorted(tlgeo.__all__, key=str.lower):
        value = getattr(tlgeo, name)
        module = value.__module__ if hasattr(value, "__module__") and callable(value) else None
        if module is None:
            continue  # a constant (SITES): its module's page says what it holds
        kind = "class" if isinstance(value, type) else "function"
        lines += rst(kind, f"{module}.{value.__qualname__}")
    lines += ["## The analysis contract (`tlgeo.runner.analysis`)", ""]
    for name in ("Analysis", "Config", "Result", "Table", "param", "register_analysis"):
        value = getattr(__import__("tlgeo.runner.analysis", fromlist=[name]), name)
        lines += rst("class" if isinstance(value, type) else "function", f"tlgeo.runner.analysis.{name}")
    lines += ["## The analyses", ""]
    for a in load_analyses().values():
        lines += [
            f"### `{a.name}`",
            "",
            f"{a.description} (`tlgeo {a.command_name}`; its settings:)",
            "",
            "| setting | default | what it is |",
            "|---|---|---|",
        ]
        for f in dataclasses.fields(a.config):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            text = " ".join(str(f.metadata.get("help", "")).split()).replace("|", "\\|")
            lines.append(f"| `{f.name}` | `{default!r}` | {text} |".replace("``", "` `"))
        lines += [""]
        lines += rst("class", f"{a.config.__module__}.{a.config.__qualname__}")
        lines += rst("function", f"{a.run.__module__}.{a.run.__qualname__}")
        lines += rst("class", f"{a.result.__module__}.{a.result.__qualname__}")
    documented = set(re.findall(r"^\.\. auto\w+:: (\S+)", "\n".join(lines), flags=re.M))
    used = []
    for module, name in docs_imports():
        value = getattr(importlib.import_module(module), name)
        if not callable(value) or not hasattr(value, "__qualname__"):
            continue  # a constant: its module's page says what it holds
        target = f"{value.__module__}.{value.__qualname__}"
        if target not in documented:
            documented.add(target)
            used.append((target, "class" if isinstance(value, type) else "function"))
    if used:
        lines += [
            "## What the guides import",
            "",
            "Every other name the pages of these docs (and the README) import from tlgeo, where it is defined.",
            "",
        ]
        for target, kind in sorted(used, key=lambda t: t[0].lower()):
            lines += rst(kind, target)
    return "\n".join(lines)


IMPORT = re.compile(r"^\s*from\s+(tlgeo(?:\.\w+)*)\s+import\s+(\([^)]*\)|[^\n]+)", re.M)


CODE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def docs_imports() -> list[tuple[str, str]]:
    """``(module, name)`` of every name the docs' pages and the README use from tlgeo, in order: each ``from
    tlgeo... import name``, and each name of such a module's ``__all__`` a page's Python snippet names (called in a
    comment, as ``Task(...)``)."""
    out = []
    for page in [*sorted(HERE.rglob("*.md")), HERE.parent / "README.md"]:
        if "_generated" in page.parts or "_build" in page.parts:
            continue
        text = page.read_text()
        code = "\n".join(CODE.findall(text))
        words = set(re.findall(r"\b\w+\b", code))
        for module, names in IMPORT.findall(text):
            for name in names.strip("()").replace("\n", ",").split(","):
                name = name.split("#")[0].split(" as ")[0].strip()
                if name and name != "*" and (module, name) not in out:
                    out.append((module, name))
            public = getattr(importlib.import_module(module), "__all__", ())
            out += [(module, w) for w in public if w in words and (module, w) not in out]
    return out


generate()
