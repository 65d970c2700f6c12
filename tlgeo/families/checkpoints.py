"""The seed papers' real models as test fixtures: their published configs, reduced to test size.

:data:`SEED_CHECKPOINTS` holds, for each hub id the seed papers use, the values of that model's
public ``config.json`` on the Hugging Face hub (its model card's files), written down offline
from those files in the model's family module (``Family.checkpoints``,
:mod:`tlgeo.families.architectures`): nothing here is downloaded. Only the keys that change the
architecture are kept (sizes, heads, norms and their epsilons, activations, rotary settings,
sliding windows and their layer pattern, soft-capping, mixture-of-experts fields, parallel /
post-LN blocks, the Mamba mixer's sizes, tied embeddings, the weights' published quantisation);
token ids, dtypes, dropout, initialisation ranges and transformers' bookkeeping are left out.
Keys are spelt as in ``config.json``.

:data:`SEED_FAMILIES` names each model's tlgeo family (both are views the registry builds from
the family modules), and :func:`reduced_config` turns a real config into a transformers config
of the same architecture, every real value kept except the sizes, so that a random model of it
(well under 1M parameters, the byte tokenizer's 258 ids) boots in about a second: the seed
models as test fixtures, without their weights.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from ..errors import InputError, UnknownNameError
from .registry import SEED_CHECKPOINTS, SEED_FAMILIES

__all__ = ["SEED_CHECKPOINTS", "SEED_FAMILIES", "reduced_config", "REDUCED"]

# ---------------------------------------------------------------------------------------------
# Reduced configs: the real architecture, test-sized
# ---------------------------------------------------------------------------------------------

# the reduced sizes (the byte tokenizer's ids, see tlgeo.models.byte_tokenizer)
REDUCED: dict[str, int] = dict(
    hidden=64,
    heads=4,
    head_dim=16,
    intermediate=128,
    experts=4,
    top_k=2,
    max_positions=256,
    sliding_window=8,
    vocab=258,
    bos=256,
    eos=257,
    pad=257,
)

_DROP = ("quantization_config",)  # the published weights' format: a GPU kernel or a download, and no weights here
_LAYERS = ("num_hidden_layers", "n_layer")
_HIDDEN = ("hidden_size", "n_embd")
_HEADS = ("num_attention_heads", "n_head")
_INTERMEDIATE = ("intermediate_size", "ffn_dim", "n_inner")
_POSITIONS = ("max_position_embeddings", "n_positions", "n_ctx")
_WINDOWS = ("sliding_window", "sliding_window_size")
_EXPERTS = ("num_experts", "num_local_experts")
_TOP_K = ("num_experts_per_tok", "experts_per_token")


def _kv_heads(heads: int, kv: int, new_heads: int) -> int:
    """The divisor of ``new_heads`` whose query / KV ratio is nearest the real one (MHA stays MHA, MQA MQA)."""
    if kv >= heads:
        return new_heads
    if kv == 1:
        return 1
    ratio = heads / kv
    divisors = [d for d in range(1, new_heads + 1) if new_heads % d == 0]
    return min(divisors, key=lambda d: (abs(math.log(new_heads / d) - math.log(ratio)), d))


def _layer_types(real: dict[str, Any], n_layers: int) -> list[str] | None:
    """The real model's per-layer attention kinds (as transformers derives them from the real config),
    cut to ``n_layers``; where the real model has both sliding and full layers and the cut lost one
    kind, the last layer takes it (Gemma 3's 5 sliding : 1 full keeps a full layer). ``None`` where
    the layers are all of one kind and the real config does not list them."""
    import transformers

    values = copy.deepcopy({k: v for k, v in real.items() if k not in ("model_type", *_DROP)})
    full = transformers.AutoConfig.for_model(real["model_type"], **values)
    types = getattr(full, "layer_types", None)
    if not types:
        return None
    types = list(types)
    if "layer_types" not in real and len(set(types)) < 2:
        return None  # one kind throughout: transformers derives it again for n_layers
    cut = types[:n_layers]
    for kind in dict.fromkeys(types):
        if kind not in cut and n_layers >= 2:
            cut[-1] = kind
    return cut


def reduced_config(hub_id: str, *, n_layers: int = 2):
    """A transformers config of ``hub_id``'s architecture, test-sized (:data:`REDUCED`).

    Every real value of :data:`SEED_CHECKPOINTS` is kept except the sizes: ``n_layers`` blocks
    (per-layer lists cut to them, a sliding/full pattern keeping one of each), hidden size 64, 4
    query heads and the real query/KV ratio as near as 4 heads allow, head_dim 16, MLPs of 128,
    4 experts choosing ``min(real, 2)``, OPT's embedding projection and Mamba's time-step rank in
    the real ratio to the hidden size, 256 positions, windows of 8, the byte tokenizer's 258 ids.
    """
    if hub_id not in SEED_CHECKPOINTS:
        raise UnknownNameError(f"unknown seed checkpoint {hub_id!r}; known: {', '.join(SEED_CHECKPOINTS)}")
    if n_layers < 1:
        raise InputError(f"n_layers must be at least 1, got {n_layers}")
    import transformers

    real = SEED_CHECKPOINTS[hub_id]
    r = REDUCED
    # a copy: transformers standardises rope_scaling in place (it adds rope_theta to the dict)
    out: dict[str, Any] = copy.deepcopy({k: v for k, v in real.items() if k not in ("model_type", *_DROP)})
    real_hidden = next(real[k] for k in _HIDDEN if k in real)
    real_heads = next((real[k] for k in _HEADS if k in real), None)

    for k in _LAYERS:
        if k in real:
            out[k] = n_layers
    for k in _HIDDEN:
        if k in real:
            out[k] = r["hidden"]
    for k in _HEADS:
        if k in real:
            out[k] = r["heads"]
    if "num_key_value_heads" in real:
        out["num_key_value_heads"] = _kv_heads(real_heads, real["num_key_value_heads"], r["heads"])
    if "head_dim" in real:
        out["head_dim"] = r["head_dim"]
    if real.get("query_pre_attn_scalar") is not None:  # the real scale relative to head_dim (Gemma: equal)
        out["query_pre_attn_scalar"] = r["head_dim"] * real["query_pre_attn_scalar"] / real["head_dim"]
        if float(out["query_pre_attn_scalar"]).is_integer():
            out["query_pre_attn_scalar"] = int(out["query_pre_attn_scalar"])
    for k in _INTERMEDIATE:
        if k in real:
            out[k] = r["intermediate"]
    if real["model_type"] == "mamba":  # the mixer's width is expand x hidden
        out["intermediate_size"] = real["expand"] * r["hidden"]
        out["time_step_rank"] = max(1, round(real["time_step_rank"] * r["hidden"] / real_hidden))
    if "moe_intermediate_size" in real:  # the experts' width in the real ratio to the hidden size
        out["moe_intermediate_size"] = max(8, 8 * round(real["moe_intermediate_size"] * r["hidden"] / real_hidden / 8))
    for k in _EXPERTS:
        if k in real:
            out[k] = min(real[k], r["experts"])
    for k in _TOP_K:
        if k in real:
            out[k] = min(real[k], r["top_k"])
    if "word_embed_proj_dim" in real:  # OPT: the embeddings' width in the real ratio to the hidden size
        out["word_embed_proj_dim"] = round(r["hidden"] * real["word_embed_proj_dim"] / real_hidden)
    for k in _POSITIONS:
        if k in real:
            out[k] = min(real[k], r["max_positions"])
    for k in _WINDOWS:
        if real.get(k) is not None:
            out[k] = min(real[k], r["sliding_window"])
    if "max_window_layers" in real:
        out["max_window_layers"] = min(real["max_window_layers"], n_layers)
    if "mlp_only_layers" in real:
        out["mlp_only_layers"] = [i for i in real["mlp_only_layers"] if i < n_layers]
    types = _layer_types(real, n_layers)
    if types is not None:
        out["layer_types"] = types
        out.pop("sliding_window_pattern", None)  # the explicit pattern replaces it
    out.update(vocab_size=r["vocab"], bos_token_id=r["bos"], eos_token_id=r["eos"], pad_token_id=r["pad"])
    return transformers.AutoConfig.for_model(real["model_type"], **out)
