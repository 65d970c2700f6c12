"""The direction-vs-magnitude paper's reference numbers (seed paper 003; Pythia-410M, layers 8-15
perturbed, unless said), in one place: the CLI, the atlas headline and the table scripts read them."""

from __future__ import annotations

__all__ = [
    "MODEL",
    "PAPER_DELTAS",
    "PAPER_DAMAGE",
    "PAPER_RATIOS",
    "PAPER_BLIMP",
    "PAPER_RECOVERY",
    "PAPER_ENTROPY",
    "PAPER_PROBES",
    "FULL_SENTENCES",
    "FULL_SEEDS",
]

MODEL = "Pythia-410M, layers 8-15"
PAPER_DELTAS: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 15.0, 20.0)
# LM damage (magnitude, angle) per absolute delta; baseline loss 4.107
PAPER_DAMAGE = {
    1.0: (0.009, 0.368),
    2.0: (0.042, 0.983),
    5.0: (0.700, 3.757),
    10.0: (3.262, 7.061),
    15.0: (4.600, 7.718),
    20.0: (5.433, 7.750),
}
PAPER_RATIOS = (
    "42.9x at delta 1 and 5.4x at 5 in LayerNorm Pythia-410M, reversed (0.2x at delta 1-2) in RMSNorm TinyLlama"
)
# BLiMP agreement accuracy % (magnitude, angle) per delta
PAPER_BLIMP = {0.0: (89.5, 89.5), 5.0: (69.1, 87.9), 10.0: (56.0, 77.1), 15.0: (53.5, 67.4)}
# causal repair recovery %, delta = 5
PAPER_RECOVERY = {
    ("attn", "angle"): 28.4,
    ("attn", "magnitude"): 15.2,
    ("norm", "magnitude"): 29.9,
    ("norm", "angle"): 13.7,
}
PAPER_ENTROPY = {"clean": 1.031, "angle": 0.129, "magnitude": 0.025}  # attention entropy shifts at delta = 5
PAPER_PROBES = {("upos", "direction"): 81.6, ("upos", "magnitude"): 29.7}  # accuracy %
FULL_SENTENCES, FULL_SEEDS = 281, 5  # the notebook's budget; below it a result is an indication only
