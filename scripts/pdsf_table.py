"""The PDSF results of several models side by side with the paper's numbers, as a Markdown table.

    .venv/bin/python scripts/pdsf_table.py NAME=DIR [NAME=DIR ...]

Each ``DIR`` holds a ``tlgeo pdsf`` run (``pdsf_layers.csv``, ``pdsf_parts.csv``, and where they
were run ``pdsf_single_pass_summary.csv``, ``pdsf_generation_summary.csv``, ``pdsf_dynamics.csv``).
Geometry rows are ranges or medians over layers (SpecA, ``--mode``, the final prediction);
single-pass rows are mean KL per condition (SpecA); generation rows are per condition (SpecB).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tlgeo.pdsf.paper import comparison_table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="NAME=DIR")
    p.add_argument("--mode", default="exact", choices=("exact", "faithful"))
    p.add_argument("--template", default="raw", choices=("raw", "chat"))
    a = p.parse_args()
    runs = {}
    for r in a.runs:
        name, _, d = r.partition("=")
        runs[name] = Path(d)
    print(comparison_table(runs, a.mode, a.template))


if __name__ == "__main__":
    main()
