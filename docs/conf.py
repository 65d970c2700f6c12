"""Sphinx configuration of tlgeo's documentation (MyST Markdown; built by ``tests/test_docs.py``).

The CLI reference and the support matrix are generated from the code at build time
(:func:`generate`), so they cannot drift from it."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

project = "tlgeo"
author = "the tlgeo developers"
copyright = "the tlgeo developers (MIT licence)"
extensions = ["myst_parser"]
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

    out = HERE / "_generated"
    out.mkdir(exist_ok=True)
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "cmd")
    lines = ["# Command-line reference", "",
             "Every command's `--help`, generated from the code when the docs are built.", ""]
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
    md = ["# Support matrix", "",
          "Which sites and analyses run on which architecture family, generated from `tlgeo.families` when the "
          "docs are built (`tlgeo models --support FAMILY` gives the reasons). `yes*`: supported with a documented "
          "difference; `no`: refused.", "", markdown_table()]
    (out / "support.md").write_text("\n".join(md) + "\n")
    from tlgeo.report.registry import analyses_markdown

    (out / "analyses.md").write_text(analyses_markdown())


generate()
