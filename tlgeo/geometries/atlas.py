"""The closing step of ``tlgeo atlas``: the four analyses on the same tokens.

``geometries``: a small pool (768 tokens), four blocks, one perturbation draw per token and batch;
``tlgeo geometries`` runs the full pool, six blocks and two draws.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..runner.analysis import Headline, StepContext, atlas_budgets, register_analysis_step, register_chapter
from .analysis import ANALYSIS, FDR, GeometriesResult, relation_summary
from .config import GeometriesConfig

__all__ = ["CHAPTER", "GeometriesBudgets", "headline"]

CHAPTER = "geometries"
GeometriesBudgets = atlas_budgets(
    GeometriesConfig, "geometries_", ("tokens", "seq_len", "layer_count", "seeds", "k"), seeds=1
)


def headline(out: Path, budgets: GeometriesBudgets | None = None) -> Headline:
    """The strongest relation between quantities of two analyses, and whether it holds at every block."""
    path = Path(out) / "geometries_relations.csv"
    if not path.exists():
        return Headline()
    s = relation_summary(pd.read_csv(path))
    if s.empty:
        return Headline()
    top = s.iloc[0]
    held = (
        "at every block"
        if top["same_sign"] and top["significant"] == top["blocks"]
        else f"significant at {int(top['significant'])} of {int(top['blocks'])} blocks"
    )
    bh = (
        ""
        if pd.isna(top["significant_bh"])
        else f", {int(top['significant_bh'])} of {int(top['blocks'])} with BH q < {FDR} over all pairs x blocks"
    )
    atyp = (
        ""
        if pd.isna(top["partial_atypical"])
        else f", given also the state's norm and kNN distance {top['partial_atypical']:+.2f}"
    )
    return Headline(
        [
            f"Four geometries: across analyses, {top['a']} and {top['b']} relate most (Spearman "
            f"{top['mean_rho']:+.2f} on average over blocks, {held}{bh}; partial given position and "
            f"frequency {top['partial']:+.2f}{atyp}, shuffled within windows {top['shuffled']:+.2f})."
        ]
    )


register_chapter(CHAPTER, GeometriesBudgets, headline=headline, title="One token, four geometries")


@register_analysis_step(
    "geometries",
    CHAPTER,
    ANALYSIS,
    lambda b: b.config(),
    "one token, four geometries: every analysis's per-token quantity on one pool, related",
)
def _section(ctx: StepContext, result: GeometriesResult) -> None:
    from .plots import plot_pairs, plot_relations, token_view

    cfg, tokens, rel = ctx.config, result.tokens, result.relations
    ctx.report.section(
        "One token, four geometries",
        f"The four analyses measured on the same {int(tokens['index'].nunique())} tokens ({cfg.corpus} windows of "
        f"{cfg.seq_len}) at blocks {', '.join(map(str, sorted(tokens['layer'].unique())))}: the parallel ratio and "
        "alpha of each attention and MLP update and of the exclude-self value aggregate (decomposition); the loss "
        f"change when the block's output moves by {cfg.delta} of its norm along or across itself (direction vs "
        "magnitude); the energy shares of the state around the model's own prediction and that prediction's "
        "logit-lens rank (PDSF); the local linear tokenwise fit's relative error (tokenwise maps). Spearman's rho "
        "per block, CI over windows; 'shuffled' is what is left after shuffling each quantity within its window "
        "(a relation between windows, not tokens); 'partial' controls for position and token frequency, "
        "'partial_atypical' also for how atypical the token's state is (its norm, its mean distance to the k "
        "neighbours of its tokenwise fit); 'significant' counts blocks whose CI excludes 0, 'significant_bh' those "
        f"with a Benjamini-Hochberg q < {FDR} over all pairs x blocks.",
    )
    summary = relation_summary(rel)
    ctx.report.table(
        summary.head(10).round(3),
        "The ten strongest relations between quantities of two different analyses, over the blocks.",
    )
    across = rel[
        rel["a"].isin(summary["a"]) & rel.set_index(["a", "b"]).index.isin(list(zip(summary["a"], summary["b"])))
    ]
    if not across.empty:
        ctx.report.figure(
            plot_relations(across),
            "Spearman rho per block of every pair of quantities from two analyses (x: CI includes 0).",
        )
        ctx.report.figure(
            plot_pairs(tokens, summary.head(3)), "The three strongest pairs, token by token (ranks), coloured by block."
        )
    top = summary.iloc[0] if len(summary) else None
    if top is not None and "text" in tokens and tokens["text"].notna().all():
        layer = int(rel[(rel["a"] == top["a"]) & (rel["b"] == top["b"])].set_index("layer")["rho"].abs().idxmax())
        for q in (top["a"], top["b"]):
            ctx.report.circuitsvis(
                token_view(tokens, None, q, layer), f"{q} per token of the first window at block {layer}."
            )
