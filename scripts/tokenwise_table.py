"""The tokenwise results of several models side by side with the paper's claims, as a Markdown table.

    .venv/bin/python scripts/tokenwise_table.py NAME=DIR [NAME=DIR ...] [--class linear]

Each ``DIR`` holds a ``tokenwise`` run (``tokenwise_geometry.csv``, ``tokenwise_correlation.csv``).
Rows: the class's median relative error, median cos(Delta_full, Delta_tok), share of residual
angles above 60 degrees, the middle third of the layers against the rest, the best class, and
Spearman(error, KL at the patched token) over the patched layers.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from tlgeo.tokenwise.paper import TABLE as PAPER  # the paper's column, by row


def column(directory: Path, kind: str) -> dict[str, str]:
    g = pd.read_csv(directory / "tokenwise_geometry.csv")
    c = pd.read_csv(directory / "tokenwise_correlation.csv")
    b = g[g["class"] == kind].set_index("layer").sort_index()
    n = len(b)
    mid = b.iloc[n // 3 : (2 * n) // 3]["rel_error"].median()
    rest = b.drop(b.index[n // 3 : (2 * n) // 3])["rel_error"].median()
    best = g[g["class"] != "global"].groupby("class")["rel_error"].median().idxmin()
    s = c[(c["class"] == kind) & (c["target"] == "kl")]["spearman"]
    return {"rel. error (median over layers)": f"{b['rel_error'].median():.2f}",
            "cos(Δ_full, Δ_tok)": f"{b['cos_update'].median():.3f} ({b['cos_update'].min():.2f}–{b['cos_update'].max():.2f})",
            "residual > 60° from Δ_tok": f"{100 * b['share_angle_above_60'].median():.1f} %",
            "middle third / rest, rel. error": f"{mid / rest:.2f}",
            "lowest-error class": best,
            "Spearman(error, KL), median [range]": f"{s.median():.2f} [{s.min():.2f}, {s.max():.2f}]",
            "tokens, k, patched per layer": f"{int(g['n_tokens'].iloc[0]):,}, {int(g['k'].iloc[0])}, "
                                            f"{int(c['n'].iloc[0])}"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="NAME=DIR")
    p.add_argument("--class", dest="kind", default="linear")
    a = p.parse_args()
    cols = {}
    for r in a.runs:
        name, _, d = r.partition("=")
        cols[name] = column(Path(d), a.kind)
    names = list(cols)
    print(f"| `{a.kind}` | " + " | ".join(names) + " | paper |")
    print("|---|" + "---|" * (len(names) + 1))
    for row in PAPER:
        print(f"| {row} | " + " | ".join(cols[n][row] for n in names) + f" | {PAPER[row]} |")


if __name__ == "__main__":
    main()
