"""The tokenwise results of several models side by side with the paper's claims, as a Markdown table.

    .venv/bin/python scripts/tokenwise_table.py NAME=DIR [NAME=DIR ...] [--class linear]

Each ``DIR`` holds a ``tokenwise`` run (``tokenwise_geometry.csv``, ``tokenwise_correlation.csv``); the rows are
:func:`tlgeo.tokenwise.paper.paper_column`'s (RESULTS §4 prints the same table for its two runs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tlgeo.tokenwise.paper import comparison_table  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="NAME=DIR")
    p.add_argument("--class", dest="kind", default="linear")
    a = p.parse_args()
    print(comparison_table({name: Path(d) for name, _, d in (r.partition("=") for r in a.runs)}, a.kind))


if __name__ == "__main__":
    main()
