"""The tokenwise-layer-map paper's claims (seed paper 002, "On the Geometric Structure of Layer
Updates in Deep Language Models"), in one place: the CLI, the atlas section and headline, and
``scripts/tokenwise_table.py`` read them. The paper gives qualitative claims and one range
(Spearman), no table of numbers per model."""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "PAPER",
    "POOL_TOKENS",
    "COS_UPDATE",
    "SHARE_ANGLE",
    "DEPTH",
    "SPEARMAN",
    "SPEARMAN_RANGE",
    "TABLE",
    "SECTION",
    "paper_column",
    "comparison_table",
]

POOL_TOKENS = "10^4-10^5"  # token states per pool
COS_UPDATE = "about 1"  # median cos(Delta_full, Delta_tok): the full update is almost the tokenwise one
SHARE_ANGLE = "many"  # residuals more than 60 degrees from Delta_tok
DEPTH = "middle layers"  # where the residuals are largest
SPEARMAN = "often above 0.7, up to 0.95"  # Spearman(approximation error, KL of patching)
SPEARMAN_RANGE = "0.7-0.95"

PAPER = {
    "cos_update": "≈ 1",
    "share_angle_above_60": "many tokens",
    "spearman": "0.7–0.95",
    "depth": "middle layers: largest residuals, weakest alignment",
}

# the paper's column of comparison_table (scripts/tokenwise_table.py, RESULTS §4), by row
TABLE = {
    "tokens, k, patched tokens x layers": "10^4–10^5 tokens",
    "rel. error (median over layers)": "—",
    "cos(Δ_full, Δ_tok), median [range] over layers": "≈ 1",
    "residual > 60° from Δ_tok (median over layers)": "many tokens",
    "residual's energy in Δ_tok's dominant subspace (median)": "little",
    "middle third / rest, rel. error": "> 1 (middle layers worst)",
    "lowest-error class (median rel. error)": "—",
    "Spearman(error, KL), median [range] over patched layers": "often > 0.7, up to 0.95",
    "patched layers whose Spearman CI lies above 0.7": "—",
}

# the paper's claims as the atlas section states them
SECTION = (
    "The paper: Delta_full is almost perfectly aligned with Delta_tok, r has large angles to it and little "
    "energy in its dominant subspace, Spearman(error, KL of patching) is often above 0.7, and the middle "
    "layers have the largest residuals."
)


def paper_column(folder: Path, kind: str = "linear") -> dict[str, str]:
    """One ``tlgeo tokenwise`` run (``tokenwise_geometry.csv``, ``tokenwise_correlation.csv`` in ``folder``) as
    :data:`TABLE`'s rows, for the class ``kind``: medians and ranges over the fitted layers, Spearman's over the
    patched ones (the KL at the patched token)."""
    import pandas as pd

    g = pd.read_csv(Path(folder) / "tokenwise_geometry.csv")
    c = pd.read_csv(Path(folder) / "tokenwise_correlation.csv")
    b = g[g["class"] == kind].set_index("layer").sort_index()
    n = len(b)
    middle = b.iloc[n // 3 : (2 * n) // 3]["rel_error"].median()
    rest = b.drop(b.index[n // 3 : (2 * n) // 3])["rel_error"].median()
    by_class = g[g["class"] != "global"].groupby("class")["rel_error"].median()
    s = c[(c["class"] == kind) & (c["target"] == "kl")]
    patched = int(s["n"].iloc[0]) if len(s) else 0
    return {
        "tokens, k, patched tokens x layers": f"{int(g['n_tokens'].iloc[0]):,}, {int(g['k'].iloc[0])}, "
        f"{patched} x {len(s)}",
        "rel. error (median over layers)": f"{b['rel_error'].median():.2f}",
        "cos(Δ_full, Δ_tok), median [range] over layers": f"{b['cos_update'].median():.3f} "
        f"[{b['cos_update'].min():.2f}, {b['cos_update'].max():.2f}]",
        "residual > 60° from Δ_tok (median over layers)": f"{100 * b['share_angle_above_60'].median():.1f} %",
        "residual's energy in Δ_tok's dominant subspace (median)": f"{100 * b['residual_energy'].median():.1f} %",
        "middle third / rest, rel. error": f"{middle / rest:.2f}",
        "lowest-error class (median rel. error)": f"{by_class.idxmin()} ({by_class.min():.2f})",
        "Spearman(error, KL), median [range] over patched layers": (
            f"{s['spearman'].median():.2f} [{s['spearman'].min():.2f}, {s['spearman'].max():.2f}]"
        ),
        "patched layers whose Spearman CI lies above 0.7": f"{int((s['ci_low'] > 0.7).sum())} of {len(s)}",
    }


def comparison_table(runs: dict[str, Path], kind: str = "linear") -> str:
    """The Markdown table of ``tlgeo tokenwise`` runs (name -> folder) for the class ``kind`` beside the paper's
    column (:func:`paper_column`)."""
    cols = {name: paper_column(Path(d), kind) for name, d in runs.items()}
    lines = [f"| `{kind}` | " + " | ".join(cols) + " | paper |", "|---|" + "---|" * (len(cols) + 1)]
    lines += [
        f"| {row} | " + " | ".join(c[row] for c in cols.values()) + f" | {paper} |" for row, paper in TABLE.items()
    ]
    return "\n".join(lines)
