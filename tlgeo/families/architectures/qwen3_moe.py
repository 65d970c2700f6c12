"""Qwen3-MoE: Qwen3 with mixture-of-experts MLPs."""

from ..family import ATTN_TINY, Family

FAMILY = Family(
    "qwen3_moe",
    "qwen3_moe",
    "Qwen3MoeConfig",
    dict(ATTN_TINY, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1),
    moe=True,
    checkpoints={
        "Qwen/Qwen3-30B-A3B": {
            "model_type": "qwen3_moe",
            "architectures": ["Qwen3MoeForCausalLM"],
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "moe_intermediate_size": 768,
            "num_hidden_layers": 48,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "norm_topk_prob": True,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "hidden_act": "silu",
            "rms_norm_eps": 1e-06,
            "attention_bias": False,
            "rope_theta": 1000000.0,
            "rope_scaling": None,
            "max_position_embeddings": 40960,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": 48,
            "tie_word_embeddings": False,
            "vocab_size": 151936,
        },
    },
    layer_path="model.layers",
    differs="the MLP update is the router-weighted sum of the chosen experts' outputs",
)
