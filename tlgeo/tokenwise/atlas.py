"""The tokenwise-layer-map step of ``tlgeo atlas``.

``tokenwise``: a small pool of WikiText token states at every layer, the local
tokenwise classes and the global linear baseline fitted for every token and
layer, the geometry of what they leave, and the KL of patching a subset of
tokens to their approximation at a few layers, with Spearman(error, KL).
``tlgeo tokenwise`` runs the paper-scale version (10^4-10^5 tokens, every layer
patched).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..runner.analysis import Headline, StepContext, atlas_budgets, register_analysis_step, register_chapter
from .analysis import ANALYSIS, TokenwiseResult
from .config import TokenwiseConfig, evenly_spaced
from .paper import COS_UPDATE, DEPTH, SECTION, SHARE_ANGLE, SPEARMAN, SPEARMAN_RANGE
from .plots import plot_error_vs_kl, plot_layer_geometry, plot_residual_angles

__all__ = ["CHAPTER", "TokenwiseBudgets", "headline", "patched_layers"]

CHAPTER = "tokenwise"
N_BOOT = 500  # bootstrap resamples of the atlas's Spearman CIs (tlgeo tokenwise: 1000)


def patched_layers(n_layers: int, n: int) -> list[int]:
    """``n`` layer maps evenly spaced from the first to the last (all when ``n >= n_layers``)."""
    return evenly_spaced(n_layers, n)


# tokenwise_tokens, tokenwise_seq_len, tokenwise_classes, tokenwise_k, tokenwise_patch_tokens,
# tokenwise_patch_layers (a count: evenly spaced layer maps); ``.config(**fixed)`` gives the TokenwiseConfig
TokenwiseBudgets = atlas_budgets(
    TokenwiseConfig,
    "tokenwise_",
    ("tokens", "seq_len", "classes", "k", "patch_tokens", "patch_layer_count"),
    rename={"patch_layer_count": "patch_layers"},
)


def headline(out: Path, budgets: TokenwiseBudgets | None = None) -> Headline:
    """Alignment, residual angles, Spearman(error, KL) and the depth profile, next to the paper."""
    geo_path, corr_path = Path(out) / "tokenwise_geometry.csv", Path(out) / "tokenwise_correlation.csv"
    if not geo_path.exists():
        return Headline()
    g = pd.read_csv(geo_path)
    local = g[g["class"] != "global"]
    best = local.groupby("class")["rel_error"].median().idxmin()
    b = g[g["class"] == best]
    worst = b.sort_values("rel_error").iloc[-3:]["layer"].tolist()
    n_layers = int(g["layer"].max()) + 1
    sentence = (
        f"Tokenwise maps ({int(g['n_tokens'].iloc[0])} tokens): the best local class, {best}, leaves a median "
        f"relative error of {b['rel_error'].median():.2f}; cos(Delta_full, Delta_tok) has median "
        f"{b['cos_update'].median():.3f} over layers (paper: {COS_UPDATE}) and "
        f"{100 * b['share_angle_above_60'].median():.0f} % of residuals are more than 60 degrees from Delta_tok "
        f"(paper: {SHARE_ANGLE}); the largest errors are at layers {', '.join(map(str, sorted(worst)))} of {n_layers} "
        f"(paper: {DEPTH})."
    )
    sentences, warnings = [sentence], []
    if corr_path.exists():
        c = pd.read_csv(corr_path).query("target == 'kl' and `class` == @best")
        sentences.append(
            f"Spearman(error, KL of patching) for {best}: median {c['spearman'].median():.2f} over "
            f"{len(c)} patched layers (range {c['spearman'].min():.2f} to {c['spearman'].max():.2f}; "
            f"the paper: {SPEARMAN})."
        )
        n = int(c["n"].iloc[0]) if len(c) else 0
        if n < 100:
            warnings.append(
                f"Tokenwise: Spearman on {n} patched tokens per layer: indication only "
                "(tlgeo tokenwise patches hundreds)."
            )
    return Headline(sentences, warnings)


register_chapter(CHAPTER, TokenwiseBudgets, headline=headline, title="Tokenwise layer maps (seed paper 002)")


@register_analysis_step(
    "tokenwise",
    CHAPTER,
    ANALYSIS,
    lambda b: b.config(n_boot=N_BOOT) if b.tokenwise_tokens else None,  # 0 tokens: skipped
    "tokenwise layer maps: local kNN fits of h_{l+1} ~ A(x) x and what they leave (seed paper 002)",
)
def _section(ctx: StepContext, result: TokenwiseResult) -> None:
    geometry, corr, tokens = result.geometry, result.correlation, result.tokens
    if geometry is None or geometry.empty:
        return
    n_tok, k = int(geometry["n_tokens"].iloc[0]), int(geometry["k"].iloc[0])
    ctx.report.section(
        "Tokenwise layer maps (seed paper 002)",
        f"Each layer map h_l -> h_(l+1) of {n_tok} WikiText tokens, fitted per token by least squares on its {k} "
        "nearest neighbours in h_l (no token of its own window), in restricted tokenwise classes, and by one global "
        "linear map (cross-fitted). Delta_full = h_(l+1) - h_l, Delta_tok = T(h_l) - h_l, r = h_(l+1) - T(h_l). "
        + SECTION,
    )
    ctx.report.figure(
        plot_layer_geometry(geometry),
        "Per layer and class: median ||r|| / ||Delta_full||, median "
        "cos(Delta_full, Delta_tok), share of residual angles above 60°.",
    )
    ctx.report.figure(
        plot_residual_angles(tokens),
        "Residual angle to Delta_tok of the patched tokens at the layer with the largest error; the 60° line marked.",
    )
    ctx.report.figure(
        plot_error_vs_kl(tokens, corr),
        "Relative error against the KL of patching h_(l+1) of one "
        "token to T(h_l), at the middle patched layer; Spearman's rho "
        "per class in the legend.",
    )
    table = geometry.groupby("class")[["cos_update", "rel_error", "share_angle_above_60", "residual_energy"]].median()
    c = corr[corr["target"] == "kl"].groupby("class")["spearman"].median().rename("spearman_kl")
    ctx.report.table(
        table.join(c).reset_index(),
        "Medians over layers of the per-layer medians; Spearman: median "
        f"over the patched layers. The paper: cos {COS_UPDATE}, Spearman "
        f"{SPEARMAN_RANGE}.",
        digits=3,
    )
