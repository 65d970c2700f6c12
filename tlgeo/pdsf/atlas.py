"""The PDSF step of ``tlgeo atlas``.

``pdsf``: the geometry of the paper's SpecA prompts at every layer (ranks, energies,
interface dimension, complexity, discrimination), single-pass edits on a subset of them,
persistent rotations of D, S, the top of F and a random subspace on a subset of the SpecB
continuation prompts, and the static/dynamic split of F along their unedited continuations.
``tlgeo pdsf`` runs all prompts, 64 tokens and also rotates F's dynamic part.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..runner.analysis import Headline, StepContext, atlas_budgets, register_analysis_step, register_chapter
from ..runner.results import IDENTITY
from .analysis import ANALYSIS, PDSFResult
from .config import PDSFConfig
from .interventions import CONDITIONS
from .paper import (
    MODELS,
    PAPER_DIVERGENCE,
    PAPER_GENERATION_PROMPTS,
    PAPER_INTERFACE_DIM,
    PAPER_K_D,
    PAPER_NEW_TOKENS,
    divergence_text,
    single_pass_text,
)
from .plots import (
    plot_complexity,
    plot_discrimination,
    plot_divergence,
    plot_energy_pr,
    plot_f_dynamics,
    plot_single_pass,
)

__all__ = ["CHAPTER", "PDSFBudgets", "headline"]

CHAPTER = "pdsf"
ATLAS_CONDITIONS = ("D", "S", "F_top", "random")  # F_dynamic in tlgeo pdsf (it needs another generation)

# the budgets are PDSFConfig fields; the step also fixes one repeat per single-pass edit and ATLAS_CONDITIONS
PDSFBudgets = atlas_budgets(
    PDSFConfig,
    "pdsf_",
    ("geometry_per_group", "single_pass_per_group", "per_group", "new_tokens", "mode"),
    rename={"per_group": "generation_per_group"},
)


def _config(b) -> PDSFConfig:
    """The analysis config of the step's budgets (the SpecA prompts, SpecB continuations)."""
    return b.config(repeats=1, conditions=ATLAS_CONDITIONS)


def headline(out: Path, budgets: PDSFBudgets | None = None) -> Headline:
    """The interface dimension, the ranks, the angle of u_hat to the principal axes, and the
    divergence of persistent rotations, next to the paper."""
    layers, summary = Path(out) / "pdsf_layers.csv", Path(out) / "pdsf_generation_summary.csv"
    if not layers.exists():
        return Headline()
    g = pd.read_csv(layers)
    sentences = [
        f"PDSF ({int(g['n_prompts'].iloc[0])} SpecA prompts): the interface dimension 1 + PR_D + PR_S is "
        f"{g['interface_dim'].min():.1f} to {g['interface_dim'].max():.1f} over layers (paper: "
        f"{PAPER_INTERFACE_DIM}), k_D {g['k_D'].min()}-{g['k_D'].max()} (paper: {PAPER_K_D}), and u_hat is on "
        f"average {g['angle_u_top_axis'].mean():.0f} degrees from the top principal axis (paper: almost orthogonal)."
    ]
    warnings = []
    single = Path(out) / "pdsf_single_pass_summary.csv"
    if single.exists():
        sp = pd.read_csv(single).set_index("condition")
        got = [
            f"{c} {sp.loc[c, 'kl_mean']:.3g}"
            for c in ("F_mix", "F_attenuate", "D_rotate", "S_rotate", "random_rotate")
            if c in sp.index
        ]
        sentences.append(
            f"Single-pass edits at state {int(sp['layer'].iloc[0])}, next-token KL (nats): "
            + ", ".join(got)
            + f" (paper: {single_pass_text()})."
        )
    if summary.exists():
        s = pd.read_csv(summary).set_index("condition")
        parts = [
            f"{c} {s.loc[c, 'immediate_pct']:.0f} %"
            + (f" (paper {PAPER_DIVERGENCE[c][0]:g} %)" if c in PAPER_DIVERGENCE else "")
            for c in CONDITIONS
            if c in s.index
        ]
        sentences.append("Persistent rotations, immediate divergence: " + ", ".join(parts) + ".")
        n = int(s["n"].iloc[0])
        if n < PAPER_GENERATION_PROMPTS:
            warnings.append(
                f"PDSF: persistent rotations on {n} SpecB prompts: indication only (the paper: "
                f"{PAPER_GENERATION_PROMPTS})."
            )
    return Headline(sentences, warnings)


register_chapter(CHAPTER, PDSFBudgets, headline=headline, title="Prediction-anchored subspaces (seed paper 001)")


@register_analysis_step(
    "pdsf",
    CHAPTER,
    ANALYSIS,
    _config,
    "prediction-anchored subspaces: P, D, S, F at every layer; single-pass edits; persistent "
    "rotations; static and dynamic F (seed paper 001)",
)
def _section(ctx: StepContext, result: PDSFResult) -> None:
    if result.layers is not None:
        _geometry_section(ctx, result.layers, result.parts)
    if result.single_pass_summary is not None:
        _single_pass_section(ctx, result.single_pass_summary, result.single_pass_angles)
    if result.generation_summary is not None:
        _generation_section(ctx, result)


def _geometry_section(ctx: StepContext, layers: pd.DataFrame, parts: pd.DataFrame) -> None:
    b = ctx.budget
    ctx.report.section(
        "Prediction-anchored subspaces (seed paper 001)",
        f"Each of {int(layers['n_prompts'].iloc[0])} SpecA prompts' last-token state split into P (on the unit "
        "unembedding of its predicted token), D and S (PCA subspaces over the prompts of the P-residual and of "
        f"what D leaves, ranks round(PR) in [2, 12] and [4, 16]) and the complement F, {b.pdsf_mode} mode, prompts "
        f"encoded {layers['template'].iloc[0]} with BOS {'on' if layers['bos'].iloc[0] else 'off'}. The paper "
        f"({MODELS}): a small interface, u_hat nearly orthogonal to the top principal axes, "
        "complexity falling from D to F, F anti-discriminative.",
    )
    ctx.report.figure(
        plot_energy_pr(layers),
        "Left: mean share of ||h||² in each part per layer. Right: participation "
        "ratios inside D and S, the interface dimension 1 + PR_D + PR_S, ranks.",
    )
    ctx.report.figure(
        plot_complexity(parts),
        "Curvature ratio (mean 8-NN / mean pairwise distance; low: folded) and "
        "TwoNN dimension of each part's coordinates.",
    )
    ctx.report.figure(
        plot_discrimination(parts),
        "Group discrimination per part: silhouette of the 14 SpecA groups, "
        "and Cohen's d of the within-minus-between cosine gap against 20 "
        "label shuffles.",
    )


def _single_pass_section(ctx: StepContext, sp_summary: pd.DataFrame, sp_angles: pd.DataFrame) -> None:
    ctx.report.section(
        "PDSF: single-pass edits at the last prompt token",
        f"{int(sp_summary['n_prompts'].iloc[0])} SpecA prompts; at state {int(sp_summary['layer'].iloc[0])} "
        "(the authors' max(1, int(0.15 L))) one edit of the last prompt token: D, S, the top of F or a random "
        "subspace of D's rank rotated (Haar), F scaled by 0.5, mixed (signed permutation) or replaced by another "
        "group's prompt's "
        f"F at the same norm. The paper (KL, nats): {single_pass_text()}.",
    )
    ctx.report.figure(
        plot_single_pass(sp_summary, sp_angles),
        "Left: KL(clean || edited) of the next token. Right: the angle between the clean and the "
        "edited part at each later state (0: the edit is gone).",
    )
    ctx.report.table(
        sp_summary[["condition", "rank", "n_prompts", "kl_mean", "kl_sem", "flip_pct", "angle_at_edit", "angle_final"]],
        "Single-pass edits: mean KL with its standard error over prompts, the share whose argmax "
        "changed, and the mean angle of the edited part at the edit and at the last state.",
        digits=3,
    )


def _generation_section(ctx: StepContext, result: PDSFResult) -> None:
    b = ctx.budget
    summary, df, dynamics, steps = result.generation_summary, result.generation, result.dynamics, result.dynamics_steps
    ctx.report.section(
        "PDSF: persistent rotations during generation",
        f"{int(summary['n'].iloc[0])} SpecB prompts, {b.pdsf_new_tokens} greedy tokens each; at state "
        f"{int(summary['layer'].iloc[0])} (int(0.7 L)) each prompt's coordinates in D, S, the top of F or a random "
        "subspace of D's rank rotated (Haar, seed 42 + prompt) at the position being generated, every step, with "
        f"the KV cache. The paper ({PAPER_GENERATION_PROMPTS} prompts, {PAPER_NEW_TOKENS} tokens): "
        f"{divergence_text()}.",
    )
    ctx.report.figure(
        plot_divergence(df),
        "First generated token that differs from the unedited continuation, per condition (last bin: unchanged).",
    )
    shown = [
        "condition",
        "rank",
        "n",
        "unchanged_pct",
        "immediate_pct",
        "mean_first_divergence",
        "median_first_divergence",
        "kl_first",
        "kl_mean",
        "frame_shift_pct",
        "frame_shift_base_pct",
    ]
    shown = [c for c in shown if c in summary.columns]
    ci = ("immediate_ci_low", "immediate_ci_high")
    settings = {
        c: summary[c].iloc[0]
        for c in summary.columns  # the identity is in the report's header
        if c not in shown and c not in IDENTITY and c not in ci and summary[c].nunique() <= 1
    }
    table = summary[shown].copy()
    if set(ci) <= set(summary.columns):  # the rate with its 95 % Wilson CI, in one column
        table["immediate_pct"] = [
            f"{p:.1f} ({lo:.1f}-{hi:.1f})" if lo == lo else f"{p:.1f}"
            for p, lo, hi in zip(summary["immediate_pct"], summary[ci[0]], summary[ci[1]])
        ]
    base = float(summary["frame_shift_base_pct"].iloc[0]) if "frame_shift_base_pct" in summary else float("nan")
    caveat = (
        (
            f" The proxy's base rate (the same test on the unedited continuations) is {base:.0f} %: at this "
            "scale it cannot tell a frame shift from none."
            if base >= 50
            else f" Base rate of the proxy on the unedited continuations: {base:.0f} %."
        )
        if base == base
        else ""
    )
    short = {
        "unchanged_pct": "unchanged %",
        "immediate_pct": "immediate % (95 % CI)",
        "mean_first_divergence": "mean 1st div.",
        "median_first_divergence": "median 1st div.",
        "kl_first": "KL 1st",
        "kl_mean": "KL mean",
        "frame_shift_pct": "frame shift %",
        "frame_shift_base_pct": "its base rate %",
    }  # fits 800 px
    ctx.report.table(
        table.rename(columns=short),
        "Immediate divergence over the prompts whose continuation changed (the authors' convention); "
        "frame shift: a lexical proxy (TF-IDF nearer another group's unedited continuations)."
        + caveat
        + " Same for every row: "
        + ", ".join(f"{k} {v}" for k, v in settings.items())
        + ".",
        digits=3,
    )
    ctx.report.figure(
        plot_f_dynamics(dynamics, steps),
        "F of the last-position state along the unedited continuations (teacher-forced), bases fitted on "
        "the prompts: per prompt the static part is F's mean over the steps, the dynamic part the rest.",
    )
