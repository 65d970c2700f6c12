"""The tokenwise-layer-map paper's claims (seed paper 002, "On the Geometric Structure of Layer
Updates in Deep Language Models"), in one place: the CLI, the atlas section and headline, and
``scripts/tokenwise_table.py`` read them. The paper gives qualitative claims and one range
(Spearman), no table of numbers per model."""

from __future__ import annotations

__all__ = ["PAPER", "POOL_TOKENS", "COS_UPDATE", "SHARE_ANGLE", "DEPTH", "SPEARMAN", "SPEARMAN_RANGE", "TABLE",
           "SECTION"]

POOL_TOKENS = "10^4-10^5"  # token states per pool
COS_UPDATE = "about 1"  # median cos(Delta_full, Delta_tok): the full update is almost the tokenwise one
SHARE_ANGLE = "many"  # residuals more than 60 degrees from Delta_tok
DEPTH = "middle layers"  # where the residuals are largest
SPEARMAN = "often above 0.7, up to 0.95"  # Spearman(approximation error, KL of patching)
SPEARMAN_RANGE = "0.7-0.95"

PAPER = {"cos_update": "≈ 1", "share_angle_above_60": "many tokens", "spearman": "0.7–0.95",
         "depth": "middle layers: largest residuals, weakest alignment"}

# the paper's column of scripts/tokenwise_table.py, by row
TABLE = {"rel. error (median over layers)": "—", "cos(Δ_full, Δ_tok)": "≈ 1",
         "residual > 60° from Δ_tok": "many tokens", "middle third / rest, rel. error": "> 1 (middle layers worst)",
         "lowest-error class": "—", "Spearman(error, KL), median [range]": "often > 0.7, up to 0.95",
         "tokens, k, patched per layer": "—"}

# the paper's claims as the atlas section states them
SECTION = ("The paper: Delta_full is almost perfectly aligned with Delta_tok, r has large angles to it and little "
           "energy in its dominant subspace, Spearman(error, KL of patching) is often above 0.7, and the middle "
           "layers have the largest residuals.")
