"""Llama: the seed papers' own setting (RMSNorm, pre-norm, rotary, GQA)."""

from ..family import ATTN_TINY, Family

FAMILY = Family(
    "llama",
    "llama",
    "LlamaConfig",
    dict(ATTN_TINY, tie_word_embeddings=True),
    checkpoints={
        "meta-llama/Llama-3.2-3B": {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 3072,
            "intermediate_size": 8192,
            "num_hidden_layers": 28,
            "num_attention_heads": 24,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-05,
            "attention_bias": False,
            "mlp_bias": False,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "factor": 32.0,
                "high_freq_factor": 4.0,
                "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
                "rope_type": "llama3",
            },
            "max_position_embeddings": 131072,
            "tie_word_embeddings": True,
            "vocab_size": 128256,
        },
        # the card: TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T
        "TinyLlama/TinyLlama-1.1B": {
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 22,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-05,
            "rope_theta": 10000.0,
            "rope_scaling": None,
            "max_position_embeddings": 2048,
            "tie_word_embeddings": False,
            "vocab_size": 32000,
        },
    },
    layer_path="model.layers",
    differs="the papers' own setting (RMSNorm, pre-norm, rotary, GQA)",
)
