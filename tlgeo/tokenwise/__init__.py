"""Tokenwise layer maps (seed paper 002): local kNN fits of ``h_{l+1} ≈ A(x) x`` and what they leave.

* :mod:`.pool`: token states ``h_0 .. h_L`` over a corpus, collected once (bridge or plain
  Hugging Face model), memory-mapped on disk, resumable.
* :mod:`.fits`: neighbours per layer (cached), the local map classes and a global linear
  baseline, and the per-layer geometry of the residual.
* :mod:`.patching`: KL of the next-token distribution when one token's ``h_{l+1}`` is
  replaced by its tokenwise approximation, resumed from the cached residual.
* :mod:`.jacobian`: ground truth: one token's exact block map, its Jacobian, and how close a
  local fit on sampled neighbours comes to it.
* :mod:`.plots`: error and alignment per layer and class, residual angles, error vs KL.
* :mod:`.analysis`: all of it for one model, resumable: geometry per (layer, class),
  patching KL of a token subset, Spearman(error, KL) with CIs.

The math is :mod:`tlgeo.geometry.neighbours`, :mod:`tlgeo.geometry.local_maps` and
:mod:`tlgeo.geometry.tokenwise`. Not yet here: the benchmark, the
atlas section, and measurements on real models. ``notebooks/08_tokenwise.ipynb`` walks through it.
"""

from .analysis import TokenwiseResult, tokenwise_analysis
from .fits import CLASSES, layer_geometry, neighbours, tokenwise_outputs
from .jacobian import block_map, jacobian_agreement, tokenwise_jacobian
from .patching import patch_kl
from .pool import StatePool, collect_pool, layer_list

__all__ = ["StatePool", "collect_pool", "layer_list", "CLASSES", "neighbours", "tokenwise_outputs",
           "layer_geometry", "patch_kl", "tokenwise_analysis", "TokenwiseResult", "block_map", "tokenwise_jacobian",
           "jacobian_agreement"]
