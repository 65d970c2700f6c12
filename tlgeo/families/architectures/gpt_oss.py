"""gpt-oss: attention sinks, mixture-of-experts MLPs, alternate sliding-window layers."""

from ..family import ATTN_TINY, Family

FAMILY = Family(
    "gpt_oss",
    "gpt_oss",
    "GptOssConfig",
    dict(ATTN_TINY, num_hidden_layers=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=8),
    moe=True,
    sinks=True,
    sliding=True,
    checkpoints={
        "openai/gpt-oss-20b": {
            "model_type": "gpt_oss",
            "architectures": ["GptOssForCausalLM"],
            "hidden_size": 2880,
            "intermediate_size": 2880,
            "num_hidden_layers": 24,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "num_local_experts": 32,
            "num_experts_per_tok": 4,
            "experts_per_token": 4,
            "hidden_act": "silu",
            "swiglu_limit": 7.0,
            "rms_norm_eps": 1e-05,
            "attention_bias": True,
            "rope_theta": 150000,
            "rope_scaling": {
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "factor": 32.0,
                "original_max_position_embeddings": 4096,
                "rope_type": "yarn",
                "truncate": False,
            },
            "sliding_window": 128,
            "layer_types": ["sliding_attention", "full_attention"] * 12,
            "max_position_embeddings": 131072,
            "tie_word_embeddings": False,
            "vocab_size": 201088,
            # the published weights' format (MXFP4 experts); dropped by reduced_config
            "quantization_config": {
                "quant_method": "mxfp4",
                "modules_to_not_convert": [
                    "model.layers.*.self_attn",
                    "model.layers.*.mlp.router",
                    "model.embed_tokens",
                    "lm_head",
                ],
            },
        },
    },
    layer_path="model.layers",
    differs="attention sinks: pattern rows sum to less than 1 (the sink's mass reaches no value); "
    "MoE MLPs; alternate sliding-window layers",
)
