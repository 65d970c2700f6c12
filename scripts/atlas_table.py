"""Atlas results of several models side by side with the paper's numbers, as a markdown table.

python scripts/atlas_table.py results/atlas-smollm2-135m results/atlas-gemma3-270m
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from tlgeo.decomposition.paper import PAPER
from tlgeo.decomposition.summary import atlas_summary


def side_by_side(dirs: list[Path]) -> pd.DataFrame:
    """One column per atlas directory (named after it) plus ``paper``; index ``(table, row, quantity)``."""
    frames = [atlas_summary(d).assign(model=d.name.removeprefix("atlas-")) for d in dirs]
    wide = pd.concat(frames).pivot_table(
        index=["table", "row", "quantity"], columns="model", values="value", sort=False
    )
    wide = wide[[d.name.removeprefix("atlas-") for d in dirs if d.name.removeprefix("atlas-") in wide]]
    wide["paper"] = [PAPER.get(k, "") for k in wide.index]
    return wide


def _fmt(v) -> str:
    if isinstance(v, str):
        return v
    if pd.isna(v):
        return "—"
    return f"{v:.3g}" if abs(v) >= 1e4 or abs(v) < 1 else f"{v:.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", type=Path)
    args = p.parse_args()
    wide = side_by_side(args.dirs)
    cols = list(wide.columns)
    print("| table | row | quantity | " + " | ".join(cols) + " |")
    print("|" + "---|" * (3 + len(cols)))
    for (table, row, quantity), r in wide.iterrows():
        print(f"| {table} | {row} | {quantity} | " + " | ".join(_fmt(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
