"""Gemma 3 (text): norms after attention and MLP, 5 of 6 layers sliding-window, RMSNorm on q and k."""

from ..family import ATTN_TINY, Family

FAMILY = Family(
    "gemma3",
    "gemma3_text",
    "Gemma3TextConfig",
    dict(ATTN_TINY, head_dim=16, sliding_window=8),
    post_norms=True,
    sliding=True,
    checkpoints={
        "google/gemma-3-1b-pt": {
            "model_type": "gemma3_text",
            "architectures": ["Gemma3ForCausalLM"],
            "hidden_size": 1152,
            "intermediate_size": 6912,
            "num_hidden_layers": 26,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh",
            "rms_norm_eps": 1e-06,
            "attention_bias": False,
            "query_pre_attn_scalar": 256,
            "attn_logit_softcapping": None,
            "final_logit_softcapping": None,
            "rope_theta": 1000000,
            "rope_local_base_freq": 10000,
            "rope_scaling": None,
            "sliding_window": 512,
            "sliding_window_pattern": 6,
            "max_position_embeddings": 32768,
            "vocab_size": 262144,
        },
    },
    layer_path="model.layers",
    differs="norms after attention and MLP (the update is the normed output); 5 of 6 layers "
    "sliding-window; RMSNorm on q and k",
)
