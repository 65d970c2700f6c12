"""The direction-vs-magnitude step of ``tlgeo atlas``: ``tlgeo dirmag`` at the atlas budgets, three sections.

* LM damage of magnitude vs angle perturbations of the middle third of the blocks on the
  notebook's WikiText sentences, at the absolute deltas and the fractions of the median state
  norm of its budgets (:func:`tlgeo.dirmag.damage.lm_damage`);
* BLiMP agreement accuracy under the same perturbations;
* part-of-speech and depth probes on the direction vs the magnitude of the states (UD English EWT).

``tlgeo dirmag`` with its defaults runs the full sweep; with ``--repair-sentences`` and
``--entropy-sentences`` the repairs and the attention entropy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..runner.analysis import Headline, StepContext, atlas_budgets, register_analysis_step, register_chapter
from .analysis import ANALYSIS, DirmagResult
from .damage import damage_table
from .config import DirmagConfig
from .plots import plot_blimp, plot_damage, plot_probes
from .paper import FULL_SEEDS, FULL_SENTENCES, PAPER_PROBES, PAPER_RATIOS

__all__ = ["CHAPTER", "DirmagBudgets", "headline"]

CHAPTER = "dirmag"


DirmagBudgets = atlas_budgets(
    DirmagConfig,
    "dirmag_",
    (
        "sentences",
        "seeds",
        "absolute_deltas",
        "norm_fractions",
        "mode",
        "blimp_pairs",
        "probe_sentences",
        "probe_layer_count",
    ),
    rename={"absolute_deltas": "deltas", "probe_layer_count": "probe_layers"},
)


def _damage_headline(path: Path) -> Headline:
    df = pd.read_csv(path)
    t = damage_table(df).sort_values("delta_over_norm")
    lo, hi = t.iloc[0], t.iloc[-1]
    ratio = lambda r: f"{r['ratio_angle_over_magnitude']:.2f}x"  # noqa: E731
    sentences = [
        f"Direction vs magnitude: at delta {lo['delta']:g} ({100 * lo['delta_over_norm']:.1f} % of the median state "
        f"norm) the angle perturbation does {ratio(lo)} the loss damage of the magnitude one "
        f"({lo['angle_damage']:.3g} vs {lo['magnitude_damage']:.3g} nats); at delta {hi['delta']:g} "
        f"({100 * hi['delta_over_norm']:.0f} %) {ratio(hi)} ({hi['angle_damage']:.3g} vs "
        f"{hi['magnitude_damage']:.3g}). "
        f"The paper: {PAPER_RATIOS}."
    ]
    warnings = []
    n, seeds = int(df["n_sentences"].iloc[0]), int(df["seed"].nunique())
    if n < FULL_SENTENCES or seeds < FULL_SEEDS:
        warnings.append(
            f"Direction vs magnitude: {n} sentences and {seeds} seed(s), under the notebook's "
            f"{FULL_SENTENCES} x {FULL_SEEDS}: indication only (tlgeo dirmag runs the full sweep)."
        )
    return Headline(sentences, warnings)


def headline(out: Path, budgets: DirmagBudgets | None = None) -> Headline:
    """The angle/magnitude damage ratio at the smallest and largest delta, and the best probes,
    next to the paper."""
    damage, probes = Path(out) / "dirmag_damage.csv", Path(out) / "dirmag_probes.csv"
    h = _damage_headline(damage) if damage.exists() else Headline()
    if probes.exists():
        up = pd.read_csv(probes).query("task == 'upos'")
        best = up.groupby("features")["score"].max()
        h = Headline(
            list(h.sentences)
            + [
                "Probes: the best part-of-speech accuracy from the direction h/||h|| is "
                f"{best['direction']:.1f} %, from "
                f"the norm ||h|| {best['magnitude']:.1f} % (majority tag {up['baseline'].iloc[0]:.1f} %; the paper: "
                f"{PAPER_PROBES[('upos', 'direction')]} vs {PAPER_PROBES[('upos', 'magnitude')]} %)."
            ],
            list(h.warnings),
        )
    return h


register_chapter(CHAPTER, DirmagBudgets, headline=headline, title="Direction vs magnitude (seed paper 003)")


@register_analysis_step(
    "dirmag",
    CHAPTER,
    ANALYSIS,
    lambda b: b.config(),
    "direction vs magnitude: LM damage of L2-matched perturbations, BLiMP agreement under them, "
    "probes of h/||h|| vs ||h|| (seed paper 003)",
)
def _section(ctx: StepContext, result: DirmagResult) -> None:
    if result.damage is not None:
        _damage_section(ctx, result.damage)
    if result.blimp is not None:
        _blimp_section(ctx, result.blimp)
    if result.probes is not None:
        _probes_section(ctx, result.probes)


def _damage_section(ctx: StepContext, df: pd.DataFrame) -> None:
    b = ctx.budget
    table = damage_table(df)
    layers = df["layers"].iloc[0]
    layers = json.loads(layers) if isinstance(layers, str) else list(layers)  # a list, or its text from the CSV
    layers = f"{min(layers)}..{max(layers)}"
    small = b.dirmag_sentences < FULL_SENTENCES or b.dirmag_seeds < FULL_SEEDS
    ctx.report.section(
        "Direction vs magnitude (seed paper 003): LM damage",
        f"Every token state at blocks.L.hook_resid_post of blocks {layers} (the middle third) moved by the same L2 "
        f"distance delta, along itself (magnitude) or by turning it (angle, {b.dirmag_mode} mode), on "
        f"{int(df['n_sentences'].iloc[0])} of the notebook's WikiText sentences, {b.dirmag_seeds} seed(s). Damage = "
        f"perturbed - clean mean sentence loss (clean {df['clean_loss'].iloc[0]:.3f}); the median state norm is "
        f"{df['median_norm'].iloc[0]:.1f}, so the paper's absolute deltas mean less or more here than in its "
        "Pythia-410M." + (" Indication only at this budget." if small else ""),
    )
    ctx.report.figure(
        plot_damage(table),
        "Loss damage (y, symmetric log) against delta as a fraction of the median state norm (x, log), "
        "mean over seeds with their sd; crosses: the paper's Pythia-410M values at the same absolute "
        "delta (its own states are smaller, so they sit further right on its own scale). A double dissociation shows "
        "as the angle line far above the magnitude line at small "
        "delta.",
    )
    shown = table[
        [
            "delta",
            "delta_over_norm",
            "magnitude_damage",
            "magnitude_sd",
            "angle_damage",
            "angle_sd",
            "ratio_angle_over_magnitude",
            "paper_magnitude",
            "paper_angle",
        ]
    ]
    ctx.report.table(
        shown.rename(
            columns={"delta_over_norm": "delta / median norm", "ratio_angle_over_magnitude": "angle / magnitude"}
        ),
        ("Indication only. " if small else "") + "Damage (nats) per delta, mean and sd over seeds; the "
        "paper's Pythia-410M damage at its absolute deltas (none at the norm fractions).",
    )


def _blimp_section(ctx: StepContext, df: pd.DataFrame) -> None:
    b = ctx.budget
    pooled = df[df["paradigm"] == "pooled"]
    n = int(pooled["n"].iloc[0])
    ctx.report.section(
        "Direction vs magnitude: subject–verb agreement",
        f"BLiMP agreement accuracy (log P(good) > log P(bad), whole sentences) on {n} pairs "
        f"({b.dirmag_blimp_pairs} of each of the 6 paradigms; about +-{100 / n**0.5:.0f} points at this size), "
        f"clean {pooled['clean_accuracy'].iloc[0]:.1f} %, under the perturbations of section {ctx.number}. The paper "
        "(Pythia-410M, clean 89.5 %): magnitude perturbations hurt agreement more (69.1 vs 87.9 % at delta 5).",
    )
    ctx.report.figure(
        plot_blimp(df),
        "Pooled agreement accuracy against delta / median norm, mean and sd over "
        "seeds; crosses: the paper's Pythia-410M at its absolute deltas.",
    )
    table = pooled.groupby(["delta", "kind"])["accuracy"].mean().unstack("kind").reset_index()
    ctx.report.table(table, "Pooled accuracy (%) per delta and kind, mean over seeds.")


def _probes_section(ctx: StepContext, df: pd.DataFrame) -> None:
    b = ctx.budget
    layers = sorted(int(l) for l in df["layer"].unique())
    up = df[df["task"] == "upos"]
    best = up.groupby("features")["score"].max()
    ctx.report.section(
        "Direction vs magnitude: what linear probes read",
        f"Logistic (part of speech, 17 UPOS tags) and ridge (depth to the root) probes on each word's first token at "
        f"blocks {', '.join(map(str, layers))}, trained on {b.dirmag_probe_sentences} UD English EWT dev sentences "
        f"({int(df['n_train'].iloc[0])} words) and scored on as many test sentences. Best POS accuracy: direction "
        f"{best.get('direction', float('nan')):.1f} %, magnitude {best.get('magnitude', float('nan')):.1f} % (majority "
        f"tag {up['baseline'].iloc[0]:.1f} %). The paper (Pythia-410M): {PAPER_PROBES[('upos', 'direction')]} vs "
        f"{PAPER_PROBES[('upos', 'magnitude')]} %, and the magnitude carries "
        "parse depth.",
    )
    ctx.report.figure(
        plot_probes(df),
        "Held-out probe score per block with a bootstrap CI over test sentences; "
        "dashed: the majority tag / the training mean.",
    )
