"""Falcon: parallel attention + MLP from one shared norm, multi-query attention."""

from ..family import Family

FAMILY = Family(
    "falcon",
    "falcon",
    "FalconConfig",
    dict(
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        new_decoder_architecture=False,
        multi_query=True,
        parallel_attn=True,
        alibi=False,
    ),
    norm="LayerNorm",
    parallel=True,
    layer_path="transformer.h",
    differs="parallel attention + MLP from one shared norm; multi-query attention (one KV head)",
)
