"""Tokenwise layer maps (seed paper 002): how much of each layer update ``h_{l+1} - h_l`` a local,
tokenwise map ``h_{l+1} ≈ A(x) x`` fitted on a token's nearest neighbours explains, and what the
residual it cannot explain looks like and does to the output.

* :mod:`.config`: :class:`TokenwiseConfig`, every parameter (the CLI flags, the atlas budgets).
* :mod:`.analysis`: ``run(model, cfg) -> TokenwiseResult`` (pool, geometry per (layer, class),
  patching KL of a token subset, Spearman(error, KL) with CIs; resumable, split by ``(class,
  layer)`` units), and :func:`tokenwise_analysis` on a collected pool.
* :mod:`.pool`: token states ``h_0 .. h_L`` over a corpus, collected once (bridge or plain
  Hugging Face model), memory-mapped on disk, resumable.
* :mod:`.fits`: neighbours per layer (cached), the local map classes and pool-wide baselines
  (global linear, MLP), and the per-layer geometry of the residual.
* :mod:`.output_kl`: KL of the next-token distribution when one token's ``h_{l+1}`` is
  replaced by its tokenwise approximation, resumed from the cached residual.
* :mod:`.jacobian`: ground truth: one token's exact block map, its Jacobian, and how close a
  local fit on sampled neighbours comes to it.
* :mod:`.plots`: error and alignment per layer and class, residual angles, error vs KL.
* :mod:`.paper`: the paper's claims; :mod:`.atlas`: the ``tokenwise`` step of ``tlgeo atlas``;
  :mod:`.cli`: ``tlgeo tokenwise``.

The math is :mod:`tlgeo.geometry.neighbours`, :mod:`tlgeo.geometry.local_maps` and
:mod:`tlgeo.geometry.update_split`. ``notebooks/08_tokenwise.ipynb`` walks through it; measurements
on SmolLM2 and Gemma 3 are in RESULTS.md, section 4.
"""

from .analysis import TokenwiseResult, run, tokenwise_analysis, units
from .config import TokenwiseConfig
from .fits import CLASSES, layer_geometry, neighbours, tokenwise_outputs
from .jacobian import block_map, jacobian_agreement, tokenwise_jacobian
from .output_kl import patch_kl
from .pool import StatePool, collect_pool, layer_list

__all__ = [
    "StatePool",
    "collect_pool",
    "layer_list",
    "CLASSES",
    "neighbours",
    "tokenwise_outputs",
    "layer_geometry",
    "patch_kl",
    "tokenwise_analysis",
    "TokenwiseResult",
    "TokenwiseConfig",
    "run",
    "units",
    "block_map",
    "tokenwise_jacobian",
    "jacobian_agreement",
]
