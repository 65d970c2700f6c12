"""The PDSF step of ``tlgeo atlas``.

``pdsf``: the geometry of the paper's SpecA prompts at every layer (ranks, energies,
interface dimension, complexity, discrimination) and persistent rotations of D, S, the
top of F and a random subspace on a subset of the SpecB continuation prompts. ``tlgeo pdsf``
runs all prompts and 64 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..pipeline import Headline, StepContext, budget, register_family, register_step
from .analysis import pdsf_states, run_generation, run_geometry
from .interventions import CONDITIONS
from .plots import plot_complexity, plot_discrimination, plot_divergence, plot_energy_pr
from .prompts import load_prompt_set

__all__ = ["FAMILY", "PDSFBudgets", "headline"]

FAMILY = "pdsf"
PAPER = {"D": (64.0, 1.17), "S": (28.2, 5.63), "F_top": (23.1, 6.52), "random": (4.5, float("nan"))}


@dataclass
class PDSFBudgets:
    """Budgets of the PDSF step."""

    pdsf_geometry_per_group: int = budget(16, "SpecA prompts per group for the geometry (16: all 224; 0: skip)",
                                          cost="~0.15 s per prompt (SmolLM2, every layer)")
    pdsf_generation_per_group: int = budget(2, "SpecB prompts per group rotated during generation (0: skip)",
                                            cost="~2 s per prompt at 32 tokens, four conditions")
    pdsf_new_tokens: int = budget(32, "tokens generated per prompt (the paper: 64)")
    pdsf_mode: str = budget("exact", "exact: parts orthogonal per state; faithful: the authors' shared bases",
                            choices=("exact", "faithful"))


def headline(out: Path, budgets: PDSFBudgets | None = None) -> Headline:
    """The interface dimension, the ranks, the angle of u_hat to the principal axes, and the
    divergence of persistent rotations, next to the paper."""
    layers, summary = Path(out) / "pdsf_layers.csv", Path(out) / "pdsf_generation_summary.csv"
    if not layers.exists():
        return Headline()
    g = pd.read_csv(layers)
    sentences = [f"PDSF ({int(g['n_prompts'].iloc[0])} SpecA prompts): the interface dimension 1 + PR_D + PR_S is "
                 f"{g['interface_dim'].min():.1f} to {g['interface_dim'].max():.1f} over layers (paper: < 20), k_D "
                 f"{g['k_D'].min()}-{g['k_D'].max()} (paper: 4-8), and u_hat is on average "
                 f"{g['angle_u_top_axis'].mean():.0f} degrees from the top principal axis (paper: almost orthogonal)."]
    warnings = []
    if summary.exists():
        s = pd.read_csv(summary).set_index("condition")
        parts = [f"{c} {s.loc[c, 'immediate_pct']:.0f} % (paper {PAPER[c][0]:g} %)" for c in CONDITIONS if c in s.index]
        sentences.append("Persistent rotations, immediate divergence: " + ", ".join(parts) + ".")
        n = int(s["n"].iloc[0])
        if n < 80:
            warnings.append(f"PDSF: persistent rotations on {n} SpecB prompts: indication only (the paper: 80).")
    return Headline(sentences, warnings)


register_family(FAMILY, PDSFBudgets, headline=headline)


@register_step("pdsf", FAMILY, ("pdsf_layers", "pdsf_parts", "pdsf_generation_summary", "pdsf_generation"),
               "prediction-anchored subspaces: P, D, S, F at every layer; persistent rotations (seed paper 001)")
def _step_pdsf(ctx: StepContext) -> None:
    b = ctx.budget
    if not b.pdsf_geometry_per_group:
        return
    def geometry():
        g = run_geometry(ctx.model, pdsf_states(ctx.model, load_prompt_set("specA").take(b.pdsf_geometry_per_group)),
                         mode=b.pdsf_mode)
        return g.layers, g.parts

    layers, parts = ctx.cached_tables(("pdsf_layers", "pdsf_parts"), geometry)
    ctx.report.section(
        "10. Prediction-anchored subspaces (seed paper 001)",
        f"Each of {int(layers['n_prompts'].iloc[0])} SpecA prompts' last-token state split into P (on the unit "
        "unembedding of its predicted token), D and S (PCA subspaces over the prompts of the P-residual and of "
        f"what D leaves, ranks round(PR) in [2, 12] and [4, 16]) and the complement F, {b.pdsf_mode} mode, prompts "
        f"encoded {layers['template'].iloc[0]} with BOS {'on' if layers['bos'].iloc[0] else 'off'}. The paper "
        "(instruction-tuned 7B-120B): a small interface, u_hat nearly orthogonal to the top principal axes, "
        "complexity falling from D to F, F anti-discriminative.")
    ctx.report.figure(plot_energy_pr(layers), "Left: mean share of ||h||² in each part per layer. Right: participation "
                                              "ratios inside D and S, the interface dimension 1 + PR_D + PR_S, ranks.")
    ctx.report.figure(plot_complexity(parts), "Curvature ratio (mean 8-NN / mean pairwise distance; low: folded) and "
                                              "TwoNN dimension of each part's coordinates.")
    ctx.report.figure(plot_discrimination(parts), "Group discrimination per part: silhouette of the 14 SpecA groups, "
                                                  "and Cohen's d of the within-minus-between cosine gap against 20 "
                                                  "label shuffles.")
    if not b.pdsf_generation_per_group:
        return
    def generation():
        gst = pdsf_states(ctx.model, load_prompt_set("specB").take(b.pdsf_generation_per_group))
        df, summary = run_generation(ctx.model, gst, mode=b.pdsf_mode, max_new_tokens=b.pdsf_new_tokens,
                                     log_path=ctx.log("pdsf_generation"), progress=True)
        return summary, df.drop(columns=["kl_steps"])

    summary, df = ctx.cached_tables(("pdsf_generation_summary", "pdsf_generation"), generation)
    ctx.report.section(
        "10b. PDSF: persistent rotations during generation",
        f"{int(summary['n'].iloc[0])} SpecB prompts, {b.pdsf_new_tokens} greedy tokens each; at state "
        f"{int(summary['layer'].iloc[0])} (int(0.7 L)) each prompt's coordinates in D, S, the top of F or a random "
        "subspace of D's rank rotated (Haar, seed 42 + prompt) at the position being generated, every step, with "
        "the KV cache. The paper (80 prompts, 64 tokens): immediate divergence D 64 %, S 28 %, F-top 23 %, random "
        "4.5 %; mean first divergence 1.17 / 5.63 / 6.52.")
    ctx.report.figure(plot_divergence(df), "First generated token that differs from the unedited continuation, per "
                                           "condition (last bin: unchanged).")
    ctx.report.table(summary.drop(columns=["prompt_set"], errors="ignore"),
                     "Immediate divergence over the prompts whose continuation changed (the authors' convention); "
                     "frame shift: a lexical proxy (TF-IDF nearer another group's unedited continuations).", digits=3)
