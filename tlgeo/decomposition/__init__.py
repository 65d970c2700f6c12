"""Directional decomposition (seed paper 000): how much of each attention / MLP update is parallel
vs perpendicular to the state it updates, and what removing either part costs.

* :mod:`.config`: the parameters of ``tlgeo decompose`` / ``profile`` / ``ppl`` (one frozen config each).
* :mod:`.analysis`: ``run`` (the main job: profile + perplexity under every removal), ``run_profile``,
  ``run_ppl``, on the analysis contract (typed results, work units, resumable).
* :mod:`.cli`: the commands ``tlgeo decompose``, ``tlgeo profile``, ``tlgeo ppl``.
* :mod:`.observe`: per-layer/site/token parallel ratios (Figure 1).
* :mod:`.sweeps`: ΔPPL over ``s_par`` / ``s_perp`` grids, resumable (Figure 3).
* :mod:`.compare`: perplexity under a list of edits.
* :mod:`.closed_form`: the attention-diagonal closed form of the value-space edit (Table 5, Figure 4).
* :mod:`.audit`: post-W_O perturbation / energy / retained norm (Table 6).
* :mod:`.heads`: per-head alpha and causal sensitivity, patching (Figure 7).
* :mod:`.mlp_carrier`: which MLP stage carries the parallel part (Table 10).
* :mod:`.plots`: the figures (profile, sweeps, head maps, closed-form diagonal) and the circuitsvis
  view of one layer's pattern before and after the closed-form edit.
* :mod:`.paper`: the paper's reference numbers and full sweep grids.
* :mod:`.atlas`: this family's steps of ``tlgeo atlas`` and their budgets.
* :mod:`.summary`: the headline rows of an atlas directory, the report's headline.
"""

from .compare import compare_edits, removal_edits
from .observe import corpus_batches, parallel_profile, summarize_profile
from .plots import plot_profile

__all__ = ["parallel_profile", "summarize_profile", "plot_profile", "corpus_batches", "compare_edits", "removal_edits"]
