"""The four-geometries relations of several models side by side: RESULTS.md's tables.

    python scripts/geometries_table.py runs/smollm2-135m runs/gemma3-270m LN=runs/pair-gpt RMS=runs/pair-llama

Reads each folder's ``geometries_relations.csv`` (``tlgeo geometries --out <folder>``; ``NAME=FOLDER`` names
its model in the tables) and prints, for the
pairs of quantities from two different analyses: the five strongest (largest mean |rho| over the models'
blocks) and the five most consistent (one sign at every block of every model, ranked by the smallest |rho|),
each with the per-model mean rho, the blocks whose CI excludes 0 and those whose Benjamini-Hochberg q < 0.05
(over all pairs x blocks of a run), and the controls: ``partial`` (given position and token frequency),
``partial_atypical`` (given those and the state's norm and its mean distance to its tokenwise neighbours) and
``shuffled`` (within windows). A table written before the q-values or the atypical partial existed shows "?" and
NaN for them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from tlgeo.geometries import relation_summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", help="FOLDER or NAME=FOLDER")
    args = ap.parse_args()
    per = []
    for arg in args.folders:
        name, _, folder = arg.rpartition("=")
        rel = pd.read_csv(Path(folder) / "geometries_relations.csv")
        for model, r in rel.groupby("model"):
            per.append(relation_summary(r).assign(model=name or model))
    s = pd.concat(per, ignore_index=True)
    wide = s.pivot_table(index=["a", "b"], columns="model", values="mean_rho")
    bh = s["significant_bh"].astype("string").fillna("?")
    sig = s.assign(sig="CI " + s["significant"].astype(str) + ", BH " + bh + " of " + s["blocks"].astype(str)).pivot(
        index=["a", "b"], columns="model", values="sig"
    )
    g = s.groupby(["a", "b"]).agg(
        mean_abs=("mean_rho", lambda v: v.abs().mean()),
        models=("model", "nunique"),
        same_sign=("same_sign", "all"),
        partial=("partial", "mean"),
        partial_atypical=("partial_atypical", "mean"),
        shuffled=("shuffled", "mean"),
        signs=("mean_rho", lambda v: len(set(v > 0))),
        weakest=("min_rho", lambda v: v.abs().min()),
    )
    n = s["model"].nunique()
    full = g[g["models"] == n]
    table = wide.round(2).astype(str) + " (" + sig + ")"
    strongest = full.sort_values("mean_abs", ascending=False).head(5).index
    consistent = full[full["same_sign"] & (full["signs"] == 1)].sort_values("weakest", ascending=False).head(5).index
    for title, idx in (
        ("strongest", strongest),
        ("most consistent (one sign at every block of every model)", consistent),
    ):
        print(f"\n{title}: mean rho per model (blocks whose CI excludes 0, blocks with BH q < 0.05, of the blocks)")
        out = table.loc[idx].join(g.loc[idx, ["partial", "partial_atypical", "shuffled"]].round(2))
        print(out.to_markdown() if len(out) else "none")


if __name__ == "__main__":
    main()
