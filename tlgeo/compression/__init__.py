"""Compression diagnosis: how much of a compressed model's error changes the direction of each
update (perpendicular) rather than its size (parallel), and direction-aware compression objectives.

* :mod:`.config` -- ``CompressionConfig`` (the diagnosis: methods, root, corpus, prompts, seq_len, modes,
  optional on-the-fly compression) and ``CompressConfig`` (``tlgeo compress``);
* :mod:`.analysis` -- the diagnosis on the analysis contract: ``run(model, CompressionConfig) -> CompressionResult``
  (``diag_prompts.csv.gz``, ``diag_layers.csv``, ``table12.csv``, ``timing.csv``), one work unit per
  compressed method, registered as ``compression`` (``tlgeo compression``);
* :mod:`.compress` -- ``tlgeo compress``: compress the methods (reused only when made with the same
  settings), perplexity and zero-shot of each; on-the-fly compression of a loaded model;
* :mod:`.cli` -- the commands ``compression`` and ``compress``; :mod:`.paper` -- the paper's Table 12 claims;
* :mod:`.decompose` -- pure functions: error energies relative to ``Delta_base`` / ``z``,
  per-prompt ratios, per-layer summaries, the across-layer statistics (Table 12),
  and the direction-aware Wanda score;
* :mod:`.counterfactual` -- local-counterfactual and end-to-end runners on a dense and
  a compressed model (tidy DataFrames);
* :mod:`.summary` -- pure: the per-layer and across-layer tables of per-prompt rows, the PPL
  prediction table;
* :mod:`.plots` -- the figures: per-layer error (Figure 6) and its files, error against quality;
* :mod:`.methods` -- method names (``awq_perp_l0.5``, ``sgpt_2_4``, ``owl_s70``, ...) parsed into specs;
* :mod:`.llmc` -- compress with llmcompressor (AWQ, RTN, Wanda, SparseGPT, N:M, per-layer
  allocations, the direction-aware subclasses) into dense model directories, with checks
  of sparsity pattern and quantisation grid; its log kept at WARNING;
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
