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

import pandas as pd

from tlgeo.pdsf.paper import PAPER_TABLE

PAPER = PAPER_TABLE  # the paper's column (tlgeo/pdsf/paper.py)
SINGLE = ("F_transplant", "F_mix", "D_rotate", "F_attenuate", "S_rotate", "random_rotate")


def _pick(df: pd.DataFrame, mode: str, template: str = "raw") -> pd.DataFrame:
    """The rows of one mode, one prompt template, the raw û and the final prediction (other
    settings may share the file)."""
    for col, want in (("mode", mode), ("template", template), ("prediction", "final"), ("fold_norm", False)):
        if col in df.columns:
            df = df[df[col].astype(str) == str(want)]
    return df


def column(d: Path, mode: str = "exact", template: str = "raw") -> dict[str, str]:
    pick = lambda df: _pick(df, mode, template)  # noqa: E731
    g = pick(pd.read_csv(d / "pdsf_layers.csv"))
    p = pick(pd.read_csv(d / "pdsf_parts.csv"))
    med = lambda col: p.groupby("part")[col].median()  # noqa: E731
    cr, sil = med("curvature_ratio"), med("silhouette")
    out = {"width d_model": f"{int(g['d_model'].iloc[0]):,}",
           "k_D over layers": f"{g['k_D'].min()}–{g['k_D'].max()}",
           "interface dimension 1 + PR_D + PR_S": f"{g['interface_dim'].min():.1f}–{g['interface_dim'].max():.1f}",
           "participation ratio inside F (median over layers)": f"{g['pr_F'].median():.1f}",
           "energy share of P / F (median over layers)": f"{100 * g['energy_P'].median():.1f} / "
                                                         f"{100 * g['energy_F'].median():.0f} %",
           "angle of û to the top principal axis": f"{g['angle_u_top_axis'].min():.0f}–{g['angle_u_top_axis'].max():.0f}°",
           "curvature ratio D / S / F (median over layers)": f"{cr['D']:.2f} / {cr['S']:.2f} / {cr['F']:.2f}",
           "silhouette D / S / F (median over layers)": f"{sil['D']:+.2f} / {sil['S']:+.2f} / {sil['F']:+.2f}"}
    sp = d / "pdsf_generation_summary.csv"
    if sp.exists() and len(pick(pd.read_csv(sp))):
        s = pick(pd.read_csv(sp)).set_index("condition")
        conds = [c for c in ("D", "S", "F_top", "random") if c in s.index]
        out["immediate divergence D / S / F-top / random"] = " / ".join(f"{s.loc[c, 'immediate_pct']:.1f}" for c in conds) + " %"
        out["mean first divergence D / S / F-top / random"] = " / ".join(f"{s.loc[c, 'mean_first_divergence']:.2f}" for c in conds)
        out["ranks D / S / F-top / random at the edited state"] = " / ".join(str(int(s.loc[c, "rank"])) for c in conds) + \
            f" (state {int(s['layer'].iloc[0])}, {int(s['n'].iloc[0])} prompts)"
        if "F_dynamic" in s.index:
            r = s.loc["F_dynamic"]
            out["F-dynamic: immediate divergence, mean first divergence, rank"] = \
                f"{r['immediate_pct']:.1f} %, {r['mean_first_divergence']:.2f}, {int(r['rank'])}"
    sp = d / "pdsf_single_pass_summary.csv"
    if sp.exists() and len(pick(pd.read_csv(sp))):
        s = pick(pd.read_csv(sp)).set_index("condition")
        conds = [c for c in SINGLE if c in s.index]
        out["single pass, KL (nats): F-transplant / F-mix / D-rot / F-att / S-rot / random-rot"] = \
            " / ".join(f"{s.loc[c, 'kl_mean']:.3g}" for c in conds) + f" (state {int(s['layer'].iloc[0])})"
        out["single pass: angle left at the last state, D-rot / S-rot / F-mix"] = " / ".join(
            f"{s.loc[c, 'angle_final']:.0f}°" for c in ("D_rotate", "S_rotate", "F_mix") if c in s.index) + \
            " (at the edit: " + " / ".join(f"{s.loc[c, 'angle_at_edit']:.0f}°" for c in ("D_rotate", "S_rotate", "F_mix")
                                          if c in s.index) + ")"
    dy = d / "pdsf_dynamics.csv"
    if dy.exists() and len(pick(pd.read_csv(dy))):
        t = pick(pd.read_csv(dy))
        out["static share of F during generation (range over layers)"] = \
            f"{t['static_share'].min():.2f}–{t['static_share'].max():.2f} (median {t['static_share'].median():.2f})"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="NAME=DIR")
    p.add_argument("--mode", default="exact", choices=("exact", "faithful"))
    p.add_argument("--template", default="raw", choices=("raw", "chat"))
    a = p.parse_args()
    cols = {}
    for r in a.runs:
        name, _, d = r.partition("=")
        cols[name] = column(Path(d), a.mode, a.template)
    names = list(cols)
    print("| | " + " | ".join(names) + " | paper |")
    print("|---|" + "---|" * (len(names) + 1))
    for row, paper in PAPER.items():
        print(f"| {row} | " + " | ".join(cols[n].get(row, "—") for n in names) + f" | {paper} |")


if __name__ == "__main__":
    main()
