"""The directional-decomposition paper's reference numbers (seed paper 000), in one place: the
atlas steps and headline (:mod:`.atlas`, :mod:`.summary`), the sweeps' full grids and
``scripts/atlas_table.py`` read them from here."""

from __future__ import annotations

__all__ = [
    "PAPER",
    "PAPER_PROFILE",
    "PAPER_PROFILE_MODEL",
    "PAPER_ZEROSHOT_MODEL",
    "PAPER_RULER_MODEL",
    "PAPER_SMALL_MODEL",
    "S_PAR_GRID",
    "S_PERP_GRID",
]

# The paper's reference numbers for the rows of :func:`tlgeo.decomposition.summary.atlas_summary`
# (spec sections 4, 5, 7): zero-shot averages of Qwen3-1.7B (7 tasks), RULER-4k of Llama-3.2-3B,
# audit and MLP carrier of Qwen3-0.6B. Sweep tolerance: exclude-self stays within 1 PPL point for
# s_par in [0, 1].
PAPER = {
    ("ppl", "value_excl_self s_par=0", "delta_ppl"): "< 1",
    ("zeroshot", "unedited", "acc"): 61.61,
    ("zeroshot", "attn s_par=0", "acc"): 59.16,
    ("zeroshot", "value_full s_par=0", "acc"): 53.41,
    ("zeroshot", "value_excl_self s_par=0", "acc"): 60.10,
    ("zeroshot", "diag s_par=0", "acc"): 39.17,
    ("ruler", "unedited", "score"): 86.91,
    ("ruler", "value_full s_par=0.5", "score"): 84.81,
    ("ruler", "value_excl_self s_par=0.5", "score"): 86.69,
    ("ruler", "value_full s_par=0", "score"): 60.99,
    ("ruler", "value_excl_self s_par=0", "score"): 75.64,
    ("audit", "attn", "perturbation %"): 25.15,
    ("audit", "attn", "energy %"): 9.32,
    ("audit", "attn", "retained %"): 95.01,
    ("audit", "value_excl_self", "perturbation %"): 49.10,
    ("audit", "value_excl_self", "energy %"): 25.89,
    ("audit", "value_excl_self", "retained %"): 83.36,
    ("mlp_carrier", "residual mlp", "no_para"): 0.1165,
    ("mlp_carrier", "residual mlp", "no_perp"): 15.96,
    ("mlp_carrier", "h vs x", "no_para"): 0.0301,
    ("mlp_carrier", "h vs x", "no_perp"): 13.42,
    ("mlp_carrier", "y_g vs h_g", "no_para"): 0.0037,
    ("mlp_carrier", "y_g vs h_g", "no_perp"): 13.33,
    ("heads", "value_excl_self", "share alpha > 0"): "both signs",
}
# The paper's qualitative claims the headline tests against (no numbers to compare), and its models:
PAPER_PROFILE_MODEL = "Qwen3-4B"  # Figure 1
PAPER_PROFILE = f"the parallel part dominates (median parallel ratio > 1; Figure 1, {PAPER_PROFILE_MODEL})"
PAPER_ZEROSHOT_MODEL = "Qwen3-1.7B, 7 tasks"
PAPER_RULER_MODEL = "Llama-3.2-3B at 4k tokens"
PAPER_SMALL_MODEL = "Qwen3-0.6B"  # the audit (Table 6) and the MLP carrier (Table 10)

# Figure 3's full sweep grids (``tlgeo atlas --decomposition-full-grids``)
S_PAR_GRID: tuple[float, ...] = (-1, -0.5, 0, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3)
S_PERP_GRID: tuple[float, ...] = (0, 0.25, 0.5, 0.75, 1, 1.25, 1.5)
