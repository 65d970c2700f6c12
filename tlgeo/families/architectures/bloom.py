"""BLOOM: ALiBi position biases and a LayerNorm on the embeddings."""

from ..family import Family

FAMILY = Family(
    "bloom",
    "bloom",
    "BloomConfig",
    dict(hidden_size=64, n_layer=3, n_head=4),
    norm="LayerNorm",
    positions="alibi",
    start_at_layer_ok=False,
    layer_path="transformer.h",
    differs="ALiBi position biases; a LayerNorm on the embeddings",
)
