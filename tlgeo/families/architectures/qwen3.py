"""Qwen3: Llama with RMSNorm on q and k."""

from typing import Any

from ..family import ATTN_TINY, Family


def _qwen3(hidden: int, intermediate: int, layers: int, heads: int, tied: bool) -> dict[str, Any]:
    return {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-06,
        "attention_bias": False,
        "rope_theta": 1000000,
        "rope_scaling": None,
        "max_position_embeddings": 40960,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": layers,
        "tie_word_embeddings": tied,
        "vocab_size": 151936,
    }


FAMILY = Family(
    "qwen3",
    "qwen3",
    "Qwen3Config",
    dict(ATTN_TINY, head_dim=16),
    checkpoints={
        "Qwen/Qwen3-0.6B": _qwen3(1024, 3072, 28, 16, tied=True),
        "Qwen/Qwen3-1.7B": _qwen3(2048, 6144, 28, 16, tied=True),
        "Qwen/Qwen3-4B": _qwen3(2560, 9728, 36, 32, tied=True),
        "Qwen/Qwen3-8B": _qwen3(4096, 12288, 36, 32, tied=False),
    },
    layer_path="model.layers",
    differs="as Llama, with RMSNorm on q and k (the value space is unchanged)",
)
