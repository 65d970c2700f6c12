"""Compression diagnosis: perpendicular vs parallel error of compressed layers.

* :mod:`.decompose` -- pure functions: error energies relative to ``Delta_base`` / ``z``,
  per-prompt ratios, per-layer summaries, the across-layer statistics (Table 12),
  and the direction-aware Wanda score;
* :mod:`.counterfactual` -- local-counterfactual and end-to-end runners on a dense and
  a compressed model (tidy DataFrames), and the per-layer figure (Figure 6);
* :mod:`.llmc` -- compress with llmcompressor (AWQ, Wanda, N:M, direction-aware Wanda)
  into dense model directories, with checks of sparsity pattern and quantisation grid;
* :mod:`.perp_wanda` -- the direction-aware Wanda modifier (llmcompressor subclass).

llmcompressor is only imported by :mod:`.llmc` / :mod:`.perp_wanda` functions.
"""

from .decompose import across_layer_stats, error_energies, perp_wanda_score, prompt_ratios, summarize_layers

__all__ = ["across_layer_stats", "error_energies", "perp_wanda_score", "prompt_ratios", "summarize_layers"]
