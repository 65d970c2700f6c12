"""The model families tlgeo knows: what each one's blocks look like, and a tiny random config of it.

A :class:`Family` names a Hugging Face architecture (its ``model_type``) and the traits that
change what a site or an analysis means on it: the norm, parallel attention + MLP, norms after
the sublayers, mixture-of-experts MLPs, attention sinks, sliding-window layers, post-LN blocks,
no attention at all. :func:`family_of` finds a loaded model's (or a config's) family;
``tiny_config()`` builds the family's test model from transformers' own config class, small and
random, with the byte tokenizer's 258 ids (no download).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Family", "FAMILIES", "ALIASES", "get_family", "family_of", "family_of_config", "UnknownFamilyError"]


class UnknownFamilyError(ValueError):
    pass


@dataclass(frozen=True)
class Family:
    """One architecture family and the traits that change what tlgeo's quantities mean on it."""

    name: str
    model_type: str  # the HF config's model_type
    config_class: str  # transformers' config class of its tiny model
    tiny: dict  # that class's keyword arguments: small sizes
    norm: str = "RMSNorm"  # or "LayerNorm"
    positions: str = "rotary"  # rotary, absolute, alibi, none
    attention: bool = True  # attention and MLP sublayers (Mamba: a mixer only)
    parallel: bool = False  # attention and MLP both read resid_pre (GPT-NeoX, Falcon)
    post_norms: bool = False  # a norm after the attention / MLP output, before the residual add
    moe: bool = False  # mixture-of-experts MLPs
    sinks: bool = False  # a learned sink logit per head: pattern rows sum to less than 1
    sliding: bool = False  # sliding-window attention layers
    post_ln: bool = False  # the residual is renormalised after each add (OPT-350m)
    start_at_layer_ok: bool = True  # TransformerLens 4.3's start_at_layer works (not: Bloom's ALiBi, OPT's project_in)
    hf_layers: bool = True  # Llama-style decoder layers at model.layers (self_attn, mlp): the compression diagnosis
    seed_models: tuple[str, ...] = ()  # the seed papers' models of this family
    differs: str = ""  # one line: what differs from the papers' setting

    def tiny_config(self, **overrides: Any):
        """The family's tiny random-model config (transformers' own class, no download)."""
        import transformers

        kwargs = {**_TOKENS, **self.tiny, **overrides}
        return getattr(transformers, self.config_class)(**kwargs)


_TOKENS = dict(vocab_size=258, bos_token_id=256, eos_token_id=257, pad_token_id=257)
_ATTN = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256)
_OPT = dict(hidden_size=64, ffn_dim=160, num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=256,
            word_embed_proj_dim=64)

FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("llama", "llama", "LlamaConfig", dict(_ATTN, tie_word_embeddings=True),
           seed_models=("meta-llama/Llama-3.2-3B", "TinyLlama/TinyLlama-1.1B"),
           differs="the papers' own setting (RMSNorm, pre-norm, rotary, GQA)"),
    Family("qwen2", "qwen2", "Qwen2Config", _ATTN, differs="as Llama, with biases on q, k and v"),
    Family("qwen3", "qwen3", "Qwen3Config", dict(_ATTN, head_dim=16),
           seed_models=("Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B"),
           differs="as Llama, with RMSNorm on q and k (the value space is unchanged)"),
    Family("qwen3_moe", "qwen3_moe", "Qwen3MoeConfig",
           dict(_ATTN, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                decoder_sparse_step=1), moe=True, seed_models=("Qwen/Qwen3-30B-A3B",),
           differs="the MLP update is the router-weighted sum of the chosen experts' outputs"),
    Family("mistral", "mistral", "MistralConfig", dict(_ATTN, sliding_window=8), sliding=True,
           differs="sliding-window attention: a token attends to the last window only"),
    Family("mixtral", "mixtral", "MixtralConfig", dict(_ATTN, num_local_experts=4, num_experts_per_tok=2), moe=True,
           differs="the MLP update is the router-weighted sum of the chosen experts' outputs"),
    Family("gemma2", "gemma2", "Gemma2Config", dict(_ATTN, head_dim=16, sliding_window=8), post_norms=True,
           sliding=True, seed_models=("google/gemma-2-9b",),
           differs="norms after attention and MLP: the update is the normed output the residual receives; "
                   "logit soft-capping; every other layer sliding-window"),
    Family("gemma3", "gemma3_text", "Gemma3TextConfig", dict(_ATTN, head_dim=16, sliding_window=8),
           post_norms=True, sliding=True, seed_models=("google/gemma-3-1b-pt",),
           differs="norms after attention and MLP (the update is the normed output); 5 of 6 layers "
                   "sliding-window; RMSNorm on q and k"),
    Family("gpt_oss", "gpt_oss", "GptOssConfig",
           dict(_ATTN, num_hidden_layers=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8),
           moe=True, sinks=True, sliding=True, seed_models=("openai/gpt-oss-20b",),
           differs="attention sinks: pattern rows sum to less than 1 (the sink's mass reaches no value); "
                   "MoE MLPs; alternate sliding-window layers"),
    Family("phi3", "phi3", "Phi3Config", _ATTN, differs="as Llama, with fused qkv and gate_up projections"),
    Family("olmo2", "olmo2", "Olmo2Config", _ATTN, post_norms=True,
           differs="norms after attention and MLP only (no pre-norm): the update is the normed output"),
    Family("gpt2", "gpt2", "GPT2Config", dict(n_embd=64, n_layer=3, n_head=4, n_positions=256), norm="LayerNorm",
           positions="absolute", seed_models=("distilgpt2",),
           hf_layers=False, differs="LayerNorm and learned absolute positions"),
    Family("gpt_neox", "gpt_neox", "GPTNeoXConfig",
           dict(hidden_size=64, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
                max_position_embeddings=256, rotary_pct=0.5, use_parallel_residual=True),
           norm="LayerNorm", parallel=True, seed_models=("EleutherAI/pythia-410m", "EleutherAI/pythia-1.4b"),
           hf_layers=False,
           differs="parallel attention + MLP: both read resid_pre (no resid_mid); LayerNorm; partial rotary"),
    Family("opt", "opt", "OPTConfig", _OPT, norm="LayerNorm", positions="absolute",
           seed_models=("facebook/opt-1.3b",), hf_layers=False, differs="LayerNorm and learned absolute positions"),
    Family("opt_post_ln", "opt", "OPTConfig",
           dict(_OPT, word_embed_proj_dim=32, do_layer_norm_before=False, init_std=0.2),  # updates that show
           norm="LayerNorm", positions="absolute", post_ln=True, start_at_layer_ok=False, hf_layers=False,
           seed_models=("facebook/opt-350m",),
           differs="post-LN: the residual is renormalised after each add, so the state an update is added to "
                   "is not the state the next sublayer reads"),
    Family("bloom", "bloom", "BloomConfig", dict(hidden_size=64, n_layer=3, n_head=4), norm="LayerNorm",
           positions="alibi", start_at_layer_ok=False, hf_layers=False,
           differs="ALiBi position biases; a LayerNorm on the embeddings"),
    Family("falcon", "falcon", "FalconConfig",
           dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, new_decoder_architecture=False,
                multi_query=True, parallel_attn=True, alibi=False),
           norm="LayerNorm", parallel=True,
           hf_layers=False,
           differs="parallel attention + MLP from one shared norm; multi-query attention (one KV head)"),
    Family("mamba", "mamba", "MambaConfig", dict(hidden_size=64, num_hidden_layers=3, state_size=8, expand=2),
           positions="none", attention=False, seed_models=("state-spaces/mamba-130m-hf",),
           hf_layers=False,
           differs="no attention and no MLP: each block adds one selective state-space mixer's output"),
]}

ALIASES = {"neox": "gpt_neox", "pythia": "gpt_neox", "gemma3_text": "gemma3", "gptoss": "gpt_oss"}


def get_family(name: str) -> Family:
    """The family called ``name`` (or one of :data:`ALIASES`)."""
    key = ALIASES.get(str(name), str(name))
    if key not in FAMILIES:
        raise UnknownFamilyError(f"unknown model family {name!r}; known families: {', '.join(FAMILIES)}")
    return FAMILIES[key]


def family_of_config(config: Any) -> Family | None:
    """The family of a Hugging Face config (object or ``config.json`` dict); ``None`` if tlgeo has none."""
    get: Callable[[str, Any], Any] = (config.get if isinstance(config, dict)
                                      else lambda k, d=None: getattr(config, k, d))
    model_type = get("model_type", None)
    if model_type == "opt" and get("do_layer_norm_before", True) is False:
        return FAMILIES["opt_post_ln"]
    for f in FAMILIES.values():
        if f.model_type == model_type and not f.post_ln:
            return f
    return None


def family_of(model: Any) -> Family | None:
    """The family of a loaded model (a bridge: its HF model's config) or of a config; ``None`` if unknown."""
    hf = getattr(model, "original_model", None)
    config = getattr(hf, "config", None) if hf is not None else model
    return None if config is None else family_of_config(config)
