"""GPT-2: LayerNorm and learned absolute positions."""

from ..family import Family

FAMILY = Family(
    "gpt2",
    "gpt2",
    "GPT2Config",
    dict(n_embd=64, n_layer=3, n_head=4, n_positions=256),
    norm="LayerNorm",
    positions="absolute",
    checkpoints={
        "distilgpt2": {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            "n_embd": 768,
            "n_layer": 6,
            "n_head": 12,
            "activation_function": "gelu_new",  # no n_inner: 4 x n_embd
            "layer_norm_epsilon": 1e-05,
            "n_positions": 1024,
            "n_ctx": 1024,
            "vocab_size": 50257,
        },
    },
    layer_path="transformer.h",
    differs="LayerNorm and learned absolute positions",
)
