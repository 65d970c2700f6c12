"""GPT-NeoX (Pythia): parallel attention + MLP, LayerNorm, partial rotary."""

from typing import Any

from ..family import Family


def _pythia(hidden: int, intermediate: int) -> dict[str, Any]:
    return {
        "model_type": "gpt_neox",
        "architectures": ["GPTNeoXForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-05,
        "rotary_pct": 0.25,
        "rotary_emb_base": 10000,
        "use_parallel_residual": True,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
        "vocab_size": 50304,
    }


FAMILY = Family(
    "gpt_neox",
    "gpt_neox",
    "GPTNeoXConfig",
    dict(
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=3,
        num_attention_heads=4,
        max_position_embeddings=256,
        rotary_pct=0.5,
        use_parallel_residual=True,
    ),
    norm="LayerNorm",
    parallel=True,
    checkpoints={
        "EleutherAI/pythia-410m": _pythia(1024, 4096),
        "EleutherAI/pythia-1.4b": _pythia(2048, 8192),
    },
    layer_path="gpt_neox.layers",
    differs="parallel attention + MLP: both read resid_pre (no resid_mid); LayerNorm; partial rotary",
)
