"""Compression diagnosis: perpendicular vs parallel error of compressed layers.

* :mod:`.decompose` -- pure functions: error energies relative to ``Delta_base`` / ``z``,
  per-prompt ratios, per-layer summaries, the across-layer statistics (Table 12),
  and the direction-aware Wanda score;
* :mod:`.counterfactual` -- local-counterfactual and end-to-end runners on a dense and
  a compressed model (tidy DataFrames), and the per-layer figure (Figure 6);
* :mod:`.methods` -- method names (``awq_perp_l0.5``, ``sgpt_2_4``, ``owl_s70``, ...) parsed into specs;
* :mod:`.llmc` -- compress with llmcompressor (AWQ, RTN, Wanda, SparseGPT, N:M, per-layer
  allocations, the direction-aware subclasses) into dense model directories, with checks
  of sparsity pattern and quantisation grid;
* direction-aware objectives, one file each: :mod:`.perp_awq` (AWQ's scale search scored
  by the perpendicular error), :mod:`.perp_wanda` (a per-weight perpendicular score),
  :mod:`.perp_sparsegpt` (SparseGPT's mask, residual-writing layers refit for the
  perpendicular error), :mod:`.allocation` (pure: OWL-style and perpendicular-error
  layer sparsities); :mod:`.reconstruct` (pure: the refit's conjugate-gradient solver);
* :mod:`.evaluation` -- quality table (PPL, zero-shot with paired CIs, time) and the test of
  whether the perpendicular error predicts quality better than the total or parallel error.

llmcompressor is only imported by :mod:`.llmc` and the modifier modules' functions.
"""

from .decompose import across_layer_stats, error_energies, perp_wanda_score, prompt_ratios, summarize_layers

__all__ = ["across_layer_stats", "error_energies", "perp_wanda_score", "prompt_ratios", "summarize_layers"]
