"""Gemma 2: norms after attention and MLP, logit soft-capping, alternate sliding-window layers."""

from ..family import ATTN_TINY, Family

FAMILY = Family(
    "gemma2",
    "gemma2",
    "Gemma2Config",
    dict(ATTN_TINY, head_dim=16, sliding_window=8),
    post_norms=True,
    sliding=True,
    checkpoints={
        "google/gemma-2-9b": {
            "model_type": "gemma2",
            "architectures": ["Gemma2ForCausalLM"],
            "hidden_size": 3584,
            "intermediate_size": 14336,
            "num_hidden_layers": 42,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 256,
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_activation": "gelu_pytorch_tanh",
            "rms_norm_eps": 1e-06,
            "attention_bias": False,
            "query_pre_attn_scalar": 256,
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
            "rope_theta": 10000.0,
            "sliding_window": 4096,
            "sliding_window_size": 4096,
            "max_position_embeddings": 8192,
            "vocab_size": 256000,
        },
    },
    layer_path="model.layers",
    differs="norms after attention and MLP: the update is the normed output the residual receives; "
    "logit soft-capping; every other layer sliding-window",
)
