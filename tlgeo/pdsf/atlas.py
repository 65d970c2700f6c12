"""The PDSF step of ``tlgeo atlas``.

``pdsf``: the geometry of the paper's SpecA prompts at every layer (ranks, energies,
interface dimension, complexity, discrimination), single-pass edits on a subset of them,
persistent rotations of D, S, the top of F and a random subspace on a subset of the SpecB
continuation prompts, and the static/dynamic split of F along their unedited continuations.
``tlgeo pdsf`` runs all prompts, 64 tokens and also rotates F's dynamic part.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..pipeline import Headline, StepContext, budget, register_family, register_step
from .analysis import pdsf_states, run_generation, run_geometry, run_single_pass
from .interventions import CONDITIONS
from .plots import plot_complexity, plot_discrimination, plot_divergence, plot_energy_pr, plot_f_dynamics, plot_single_pass
from .prompts import load_prompt_set

__all__ = ["FAMILY", "PDSFBudgets", "headline"]

FAMILY = "pdsf"
PAPER = {"D": (64.0, 1.17), "S": (28.2, 5.63), "F_top": (23.1, 6.52), "random": (4.5, float("nan"))}
ATLAS_CONDITIONS = ("D", "S", "F_top", "random")  # F_dynamic in tlgeo pdsf (it needs another generation)


@dataclass
class PDSFBudgets:
    """Budgets of the PDSF step."""

    pdsf_geometry_per_group: int = budget(16, "SpecA prompts per group for the geometry (16: all 224; 0: skip)",
                                          cost="~0.15 s per prompt (SmolLM2, every layer)")
    pdsf_single_pass_per_group: int = budget(1, "SpecA prompts per group edited once at the last token (0: skip)",
                                             cost="~0.5 s per prompt (SmolLM2, six conditions, one repeat)")
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
    single = Path(out) / "pdsf_single_pass_summary.csv"
    if single.exists():
        sp = pd.read_csv(single).set_index("condition")
        got = [f"{c} {sp.loc[c, 'kl_mean']:.3g}" for c in ("F_mix", "F_attenuate", "D_rotate", "S_rotate", "random_rotate")
               if c in sp.index]
        sentences.append(f"Single-pass edits at state {int(sp['layer'].iloc[0])}, next-token KL (nats): " + ", ".join(got)
                         + " (paper: F-mix 2.85, F-attenuate 0.047, D-rotation 0.052, S-rotation 0.038).")
    if summary.exists():
        s = pd.read_csv(summary).set_index("condition")
        parts = [f"{c} {s.loc[c, 'immediate_pct']:.0f} % (paper {PAPER[c][0]:g} %)" for c in CONDITIONS if c in s.index]
        sentences.append("Persistent rotations, immediate divergence: " + ", ".join(parts) + ".")
        n = int(s["n"].iloc[0])
        if n < 80:
            warnings.append(f"PDSF: persistent rotations on {n} SpecB prompts: indication only (the paper: 80).")
    return Headline(sentences, warnings)


register_family(FAMILY, PDSFBudgets, headline=headline)


@register_step("pdsf", FAMILY, ("pdsf_layers", "pdsf_parts", "pdsf_single_pass_summary", "pdsf_single_pass_angles",
                                "pdsf_generation_summary", "pdsf_generation", "pdsf_dynamics", "pdsf_dynamics_steps"),
               "prediction-anchored subspaces: P, D, S, F at every layer; single-pass edits; persistent rotations; "
               "static and dynamic F (seed paper 001)")
def _step_pdsf(ctx: StepContext) -> None:
    b = ctx.budget
    if not b.pdsf_geometry_per_group:
        return
    _geometry_section(ctx)
    if b.pdsf_single_pass_per_group:
        _single_pass_section(ctx)
    if b.pdsf_generation_per_group:
        _generation_section(ctx)


def _geometry_section(ctx: StepContext) -> None:
    b = ctx.budget

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


def _single_pass_section(ctx: StepContext) -> None:
    b = ctx.budget

    def single():
        st = pdsf_states(ctx.model, load_prompt_set("specA").take(b.pdsf_single_pass_per_group))
        sp = run_single_pass(ctx.model, st, mode=b.pdsf_mode, repeats=1)
        return sp.summary, sp.angles

    sp_summary, sp_angles = ctx.cached_tables(("pdsf_single_pass_summary", "pdsf_single_pass_angles"), single)
    ctx.report.section(
        "10a. PDSF: single-pass edits at the last prompt token",
        f"{int(sp_summary['n_prompts'].iloc[0])} SpecA prompts; at state {int(sp_summary['layer'].iloc[0])} "
        "(the authors' max(1, int(0.15 L))) one edit of the last prompt token: D, S, the top of F or a random "
        "subspace of D's rank rotated (Haar), F scaled by 0.5, mixed (signed permutation) or replaced by another group's prompt's "
        "F at the same norm. The paper (KL, nats): F-transplant 5.63, F-mix 2.85, D-rotation 0.052, F-attenuate "
        "0.047, S-rotation 0.038.")
    ctx.report.figure(plot_single_pass(sp_summary, sp_angles),
                      "Left: KL(clean || edited) of the next token. Right: the angle between the clean and the "
                      "edited part at each later state (0: the edit is gone).")
    ctx.report.table(sp_summary[["condition", "rank", "n_prompts", "kl_mean", "kl_sem", "flip_pct",
                                 "angle_at_edit", "angle_final"]],
                     "Single-pass edits: mean KL with its standard error over prompts, the share whose argmax "
                     "changed, and the mean angle of the edited part at the edit and at the last state.", digits=3)


def _generation_section(ctx: StepContext) -> None:
    b = ctx.budget

    def generation():
        gst = pdsf_states(ctx.model, load_prompt_set("specB").take(b.pdsf_generation_per_group))
        res = run_generation(ctx.model, gst, conditions=ATLAS_CONDITIONS, mode=b.pdsf_mode,
                             max_new_tokens=b.pdsf_new_tokens, log_path=ctx.log("pdsf_generation"), progress=True)
        return res.summary, res.rows.drop(columns=["kl_steps"]), res.dynamics, res.steps

    summary, df, dynamics, steps = ctx.cached_tables(
        ("pdsf_generation_summary", "pdsf_generation", "pdsf_dynamics", "pdsf_dynamics_steps"), generation)
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
    ctx.report.figure(plot_f_dynamics(dynamics, steps),
                      "F of the last-position state along the unedited continuations (teacher-forced), bases fitted on "
                      "the prompts: per prompt the static part is F's mean over the steps, the dynamic part the rest.")
