"""The seed papers' real models, by name: their architectures' published configuration values.

:data:`SEED_CHECKPOINTS` holds, for each hub id the seed papers use, the values of that model's
public ``config.json`` on the Hugging Face hub (its model card's files), written down offline
from those files: nothing here is downloaded. Only the keys that change the architecture are
kept (sizes, heads, norms and their epsilons, activations, rotary settings, sliding windows and
their layer pattern, soft-capping, mixture-of-experts fields, parallel / post-LN blocks, the
Mamba mixer's sizes, tied embeddings, the weights' published quantisation); token ids, dtypes,
dropout, initialisation ranges and transformers' bookkeeping are left out. Keys are spelt as in
``config.json``.

:data:`SEED_FAMILIES` names each model's tlgeo family (:data:`.registry.FAMILIES`), and
:func:`reduced_config` turns a real config into a transformers config of the same architecture,
every real value kept except the sizes, so that a random model of it (well under 1M
parameters, the byte tokenizer's 258 ids) boots in about a second: the seed models as test
fixtures, without their weights.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from ..errors import UnknownNameError

__all__ = ["SEED_CHECKPOINTS", "SEED_FAMILIES", "reduced_config", "REDUCED"]

# ---------------------------------------------------------------------------------------------
# The published config.json values (architecture keys only)
# ---------------------------------------------------------------------------------------------


def _qwen3(hidden: int, intermediate: int, layers: int, heads: int, tied: bool) -> dict[str, Any]:
    return {
        "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": hidden, "intermediate_size": intermediate, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_act": "silu", "rms_norm_eps": 1e-06, "attention_bias": False,
        "rope_theta": 1000000, "rope_scaling": None, "max_position_embeddings": 40960,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": layers,
        "tie_word_embeddings": tied, "vocab_size": 151936,
    }


def _pythia(hidden: int, intermediate: int) -> dict[str, Any]:
    return {
        "model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"],
        "hidden_size": hidden, "intermediate_size": intermediate, "num_hidden_layers": 24,
        "num_attention_heads": 16, "hidden_act": "gelu", "layer_norm_eps": 1e-05,
        "rotary_pct": 0.25, "rotary_emb_base": 10000, "use_parallel_residual": True,
        "max_position_embeddings": 2048, "tie_word_embeddings": False, "vocab_size": 50304,
    }


def _opt(hidden: int, ffn: int, heads: int, pre_ln: bool, proj: int) -> dict[str, Any]:
    return {
        "model_type": "opt", "architectures": ["OPTForCausalLM"],
        "hidden_size": hidden, "ffn_dim": ffn, "num_hidden_layers": 24, "num_attention_heads": heads,
        "activation_function": "relu", "do_layer_norm_before": pre_ln, "_remove_final_layer_norm": False,
        "word_embed_proj_dim": proj,
        "max_position_embeddings": 2048, "vocab_size": 50272,
    }


SEED_CHECKPOINTS: dict[str, dict[str, Any]] = {
    "Qwen/Qwen3-0.6B": _qwen3(1024, 3072, 28, 16, tied=True),
    "Qwen/Qwen3-1.7B": _qwen3(2048, 6144, 28, 16, tied=True),
    "Qwen/Qwen3-4B": _qwen3(2560, 9728, 36, 32, tied=True),
    "Qwen/Qwen3-8B": _qwen3(4096, 12288, 36, 32, tied=False),
    "Qwen/Qwen3-30B-A3B": {
        "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True, "decoder_sparse_step": 1,
        "mlp_only_layers": [], "hidden_act": "silu", "rms_norm_eps": 1e-06, "attention_bias": False,
        "rope_theta": 1000000.0, "rope_scaling": None, "max_position_embeddings": 40960,
        "use_sliding_window": False, "sliding_window": None, "max_window_layers": 48,
        "tie_word_embeddings": False, "vocab_size": 151936,
    },
    "meta-llama/Llama-3.2-3B": {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
        "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_act": "silu", "rms_norm_eps": 1e-05, "attention_bias": False, "mlp_bias": False,
        "rope_theta": 500000.0,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        "max_position_embeddings": 131072, "tie_word_embeddings": True, "vocab_size": 128256,
    },
    # the card: TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T
    "TinyLlama/TinyLlama-1.1B": {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
        "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
        "num_attention_heads": 32, "num_key_value_heads": 4,
        "hidden_act": "silu", "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": None,
        "max_position_embeddings": 2048, "tie_word_embeddings": False, "vocab_size": 32000,
    },
    "google/gemma-3-1b-pt": {
        "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"],
        "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
        "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-06, "attention_bias": False,
        "query_pre_attn_scalar": 256, "attn_logit_softcapping": None, "final_logit_softcapping": None,
        "rope_theta": 1000000, "rope_local_base_freq": 10000, "rope_scaling": None,
        "sliding_window": 512, "sliding_window_pattern": 6,
        "max_position_embeddings": 32768, "vocab_size": 262144,
    },
    "google/gemma-2-9b": {
        "model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"],
        "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
        "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-06,
        "attention_bias": False, "query_pre_attn_scalar": 256,
        "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
        "rope_theta": 10000.0, "sliding_window": 4096, "sliding_window_size": 4096,
        "max_position_embeddings": 8192, "vocab_size": 256000,
    },
    "openai/gpt-oss-20b": {
        "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"],
        "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 24,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "num_local_experts": 32, "num_experts_per_tok": 4, "experts_per_token": 4,
        "hidden_act": "silu", "swiglu_limit": 7.0, "rms_norm_eps": 1e-05, "attention_bias": True,
        "rope_theta": 150000,
        "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                         "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False},
        "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False, "vocab_size": 201088,
        # the published weights' format (MXFP4 experts); dropped by reduced_config
        "quantization_config": {"quant_method": "mxfp4",
                                "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                           "model.embed_tokens", "lm_head"]},
    },
    "EleutherAI/pythia-410m": _pythia(1024, 4096),
    "EleutherAI/pythia-1.4b": _pythia(2048, 8192),
    "facebook/opt-1.3b": _opt(2048, 8192, 32, pre_ln=True, proj=2048),
    "facebook/opt-350m": _opt(1024, 4096, 16, pre_ln=False, proj=512),
    "distilgpt2": {
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
        "n_embd": 768, "n_layer": 6, "n_head": 12, "activation_function": "gelu_new",  # no n_inner: 4 x n_embd
        "layer_norm_epsilon": 1e-05, "n_positions": 1024, "n_ctx": 1024, "vocab_size": 50257,
    },
    "state-spaces/mamba-130m-hf": {
        "model_type": "mamba", "architectures": ["MambaForCausalLM"],
        "hidden_size": 768, "intermediate_size": 1536, "num_hidden_layers": 24, "n_layer": 24,
        "state_size": 16, "expand": 2, "conv_kernel": 4, "time_step_rank": 48,
        "hidden_act": "silu", "layer_norm_epsilon": 1e-05, "rms_norm": True, "fused_add_norm": True,
        "residual_in_fp32": True, "use_bias": False, "use_conv_bias": True, "vocab_size": 50280,
    },
}

SEED_FAMILIES: dict[str, str] = {
    "Qwen/Qwen3-0.6B": "qwen3",
    "Qwen/Qwen3-1.7B": "qwen3",
    "Qwen/Qwen3-4B": "qwen3",
    "Qwen/Qwen3-8B": "qwen3",
    "Qwen/Qwen3-30B-A3B": "qwen3_moe",
    "meta-llama/Llama-3.2-3B": "llama",
    "TinyLlama/TinyLlama-1.1B": "llama",
    "google/gemma-3-1b-pt": "gemma3",
    "google/gemma-2-9b": "gemma2",
    "openai/gpt-oss-20b": "gpt_oss",
    "EleutherAI/pythia-410m": "gpt_neox",
    "EleutherAI/pythia-1.4b": "gpt_neox",
    "facebook/opt-1.3b": "opt",
    "facebook/opt-350m": "opt_post_ln",
    "distilgpt2": "gpt2",
    "state-spaces/mamba-130m-hf": "mamba",
}

# ---------------------------------------------------------------------------------------------
# Reduced configs: the real architecture, test-sized
# ---------------------------------------------------------------------------------------------

# the reduced sizes (the byte tokenizer's ids, see tlgeo.models.byte_tokenizer)
REDUCED: dict[str, int] = dict(hidden=64, heads=4, head_dim=16, intermediate=128, experts=4, top_k=2,
                               max_positions=256, sliding_window=8, vocab=258, bos=256, eos=257, pad=257)

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
        raise ValueError(f"n_layers must be at least 1, got {n_layers}")
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
