"""The PDSF paper's reference numbers (seed paper 001; instruction-tuned models of 7B-120B
parameters), in one place: ``tlgeo pdsf``, the atlas step and ``scripts/pdsf_table.py`` read them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

__all__ = [
    "MODELS",
    "PAPER_DIVERGENCE",
    "PAPER_SINGLE_PASS_KL",
    "PAPER_GENERATION_PROMPTS",
    "PAPER_NEW_TOKENS",
    "PAPER_INTERFACE_DIM",
    "PAPER_K_D",
    "PAPER_TABLE",
    "divergence_text",
    "single_pass_text",
    "paper_column",
    "comparison_table",
]

MODELS = "instruction-tuned 7B-120B"
# persistent rotations during generation: (immediate divergence %, mean first divergence step) per condition
PAPER_DIVERGENCE: dict[str, tuple[float, float]] = {
    "D": (64.0, 1.17),
    "S": (28.2, 5.63),
    "F_top": (23.1, 6.52),
    "random": (4.5, float("nan")),
}
PAPER_GENERATION_PROMPTS = 80  # SpecB prompts; below this a divergence rate is an indication only
PAPER_NEW_TOKENS = 64
# single-pass edits at the last prompt token: next-token KL (nats) per condition
PAPER_SINGLE_PASS_KL: dict[str, float] = {
    "F_transplant": 5.63,
    "F_mix": 2.85,
    "D_rotate": 0.052,
    "F_attenuate": 0.047,
    "S_rotate": 0.038,
}
PAPER_INTERFACE_DIM = "< 20"  # 1 + PR_D + PR_S
PAPER_K_D = "4-8"  # instruction-tuned; base models 2-18

_NAMES = {
    "D": "D",
    "S": "S",
    "F_top": "F-top",
    "random": "random",
    "F_transplant": "F-transplant",
    "F_mix": "F-mix",
    "D_rotate": "D-rotation",
    "F_attenuate": "F-attenuate",
    "S_rotate": "S-rotation",
}


def divergence_text() -> str:
    """``immediate divergence D 64 %, S 28.2 %, ...; mean first divergence 1.17 / 5.63 / 6.52``."""
    d = PAPER_DIVERGENCE
    imm = ", ".join(f"{_NAMES[c]} {v[0]:g} %" for c, v in d.items())
    first = " / ".join(f"{v[1]:g}" for v in d.values() if v[1] == v[1])
    return f"immediate divergence {imm}; mean first divergence {first}"


def single_pass_text() -> str:
    """``F-transplant 5.63, F-mix 2.85, D-rotation 0.052, F-attenuate 0.047, S-rotation 0.038``."""
    return ", ".join(f"{_NAMES[c]} {v:g}" for c, v in PAPER_SINGLE_PASS_KL.items())


def _slash(values, fmt: str) -> str:
    return " / ".join("—" if v != v else format(v, fmt) for v in values)


_SP = ("F_transplant", "F_mix", "D_rotate", "F_attenuate", "S_rotate")
# the rows of scripts/pdsf_table.py: the paper's column
PAPER_TABLE: dict[str, str] = {
    "width d_model": "2,048–12,288 (7B–120B)",
    "k_D over layers": "4–8 (instruction-tuned; base 2–18)",
    "interface dimension 1 + PR_D + PR_S": PAPER_INTERFACE_DIM,
    "participation ratio inside F (median over layers)": "F grows with d_model",
    "energy share of P / F (median over layers)": "—",
    "angle of û to the top principal axis": "almost orthogonal",
    "curvature ratio D / S / F (median over layers)": "complexity falls from D (folded) to F (flat): the ratio rises",
    "silhouette D / S / F (median over layers)": "F anti-discriminative",
    "immediate divergence D / S / F-top / random": _slash((v[0] for v in PAPER_DIVERGENCE.values()), ".1f") + " %",
    "mean first divergence D / S / F-top / random": _slash((v[1] for v in PAPER_DIVERGENCE.values()), ".2f"),
    "ranks D / S / F-top / random at the edited state": "adaptive",
    "F-dynamic: immediate divergence, mean first divergence, rank": "—",
    "single pass, KL (nats): F-transplant / F-mix / D-rot / F-att / S-rot / random-rot": _slash(
        [PAPER_SINGLE_PASS_KL[c] for c in _SP], "g"
    )
    + " / —",
    "single pass: angle left at the last state, D-rot / S-rot / F-mix": "—",
    "static share of F during generation (range over layers)": "F splits into static and dynamic parts",
}


_SINGLE = ("F_transplant", "F_mix", "D_rotate", "F_attenuate", "S_rotate", "random_rotate")


def _pick(df: pd.DataFrame, mode: str, template: str = "raw") -> pd.DataFrame:
    """The rows of one mode, one prompt template, the raw û and the final prediction (other
    settings may share the file)."""
    for col, want in (("mode", mode), ("template", template), ("prediction", "final"), ("fold_norm", False)):
        if col in df.columns:
            df = df[df[col].astype(str) == str(want)]
    return df


def paper_column(d: Path, mode: str = "exact", template: str = "raw") -> dict[str, str]:
    """One column of :func:`comparison_table`: each row of :data:`PAPER_TABLE` this run measured, as text."""
    d = Path(d)
    pick = lambda df: _pick(df, mode, template)  # noqa: E731
    g = pick(pd.read_csv(d / "pdsf_layers.csv"))
    p = pick(pd.read_csv(d / "pdsf_parts.csv"))
    med = lambda col: p.groupby("part")[col].median()  # noqa: E731
    cr, sil = med("curvature_ratio"), med("silhouette")
    out = {
        "width d_model": f"{int(g['d_model'].iloc[0]):,}",
        "k_D over layers": f"{g['k_D'].min()}–{g['k_D'].max()}",
        "interface dimension 1 + PR_D + PR_S": f"{g['interface_dim'].min():.1f}–{g['interface_dim'].max():.1f}",
        "participation ratio inside F (median over layers)": f"{g['pr_F'].median():.1f}",
        "energy share of P / F (median over layers)": f"{100 * g['energy_P'].median():.1f} / "
        f"{100 * g['energy_F'].median():.0f} %",
        "angle of û to the top principal axis": f"{g['angle_u_top_axis'].min():.0f}–{g['angle_u_top_axis'].max():.0f}°",
        "curvature ratio D / S / F (median over layers)": f"{cr['D']:.2f} / {cr['S']:.2f} / {cr['F']:.2f}",
        "silhouette D / S / F (median over layers)": f"{sil['D']:+.2f} / {sil['S']:+.2f} / {sil['F']:+.2f}",
    }
    sp = d / "pdsf_generation_summary.csv"
    if sp.exists() and len(pick(pd.read_csv(sp))):
        s = pick(pd.read_csv(sp)).set_index("condition")
        conds = [c for c in ("D", "S", "F_top", "random") if c in s.index]
        out["immediate divergence D / S / F-top / random"] = (
            " / ".join(f"{s.loc[c, 'immediate_pct']:.1f}" for c in conds) + " %"
        )
        out["mean first divergence D / S / F-top / random"] = " / ".join(
            f"{s.loc[c, 'mean_first_divergence']:.2f}" for c in conds
        )
        out["ranks D / S / F-top / random at the edited state"] = (
            " / ".join(str(int(s.loc[c, "rank"])) for c in conds)
            + f" (state {int(s['layer'].iloc[0])}, {int(s['n'].iloc[0])} prompts)"
        )
        if "F_dynamic" in s.index:
            r = s.loc["F_dynamic"]
            out["F-dynamic: immediate divergence, mean first divergence, rank"] = (
                f"{r['immediate_pct']:.1f} %, {r['mean_first_divergence']:.2f}, {int(r['rank'])}"
            )
    sp = d / "pdsf_single_pass_summary.csv"
    if sp.exists() and len(pick(pd.read_csv(sp))):
        s = pick(pd.read_csv(sp)).set_index("condition")
        conds = [c for c in _SINGLE if c in s.index]
        out["single pass, KL (nats): F-transplant / F-mix / D-rot / F-att / S-rot / random-rot"] = (
            " / ".join(f"{s.loc[c, 'kl_mean']:.3g}" for c in conds) + f" (state {int(s['layer'].iloc[0])})"
        )
        out["single pass: angle left at the last state, D-rot / S-rot / F-mix"] = (
            " / ".join(f"{s.loc[c, 'angle_final']:.0f}°" for c in ("D_rotate", "S_rotate", "F_mix") if c in s.index)
            + " (at the edit: "
            + " / ".join(f"{s.loc[c, 'angle_at_edit']:.0f}°" for c in ("D_rotate", "S_rotate", "F_mix") if c in s.index)
            + ")"
        )
    dy = d / "pdsf_dynamics.csv"
    if dy.exists() and len(pick(pd.read_csv(dy))):
        t = pick(pd.read_csv(dy))
        out["static share of F during generation (range over layers)"] = (
            f"{t['static_share'].min():.2f}–{t['static_share'].max():.2f} (median {t['static_share'].median():.2f})"
        )
    return out


def comparison_table(runs: dict[str, Path], mode: str = "exact", template: str = "raw") -> str:
    """The Markdown table of ``tlgeo pdsf`` runs (name -> folder) beside the paper's column: geometry rows are
    ranges or medians over layers (SpecA, ``mode``, the final prediction), single-pass rows the mean KL per
    condition (SpecA), generation rows per condition (SpecB)."""
    cols = {name: paper_column(Path(d), mode, template) for name, d in runs.items()}
    lines = ["| | " + " | ".join(cols) + " | paper |", "|---|" + "---|" * (len(cols) + 1)]
    lines += [
        f"| {row} | " + " | ".join(c.get(row, "—") for c in cols.values()) + f" | {paper} |"
        for row, paper in PAPER_TABLE.items()
    ]
    return "\n".join(lines)
