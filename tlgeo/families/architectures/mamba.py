"""Mamba: no attention and no MLP, one selective state-space mixer per block."""

from ..family import Family

FAMILY = Family(
    "mamba",
    "mamba",
    "MambaConfig",
    dict(hidden_size=64, num_hidden_layers=3, state_size=8, expand=2),
    positions="none",
    attention=False,
    checkpoints={
        "state-spaces/mamba-130m-hf": {
            "model_type": "mamba",
            "architectures": ["MambaForCausalLM"],
            "hidden_size": 768,
            "intermediate_size": 1536,
            "num_hidden_layers": 24,
            "n_layer": 24,
            "state_size": 16,
            "expand": 2,
            "conv_kernel": 4,
            "time_step_rank": 48,
            "hidden_act": "silu",
            "layer_norm_epsilon": 1e-05,
            "rms_norm": True,
            "fused_add_norm": True,
            "residual_in_fp32": True,
            "use_bias": False,
            "use_conv_bias": True,
            "vocab_size": 50280,
        },
    },
    layer_path="backbone.layers",
    differs="no attention and no MLP: each block adds one selective state-space mixer's output",
)
