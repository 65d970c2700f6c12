"""Mistral: Llama with sliding-window attention."""

from ..family import ATTN_TINY, Family

FAMILY = Family(
    "mistral",
    "mistral",
    "MistralConfig",
    dict(ATTN_TINY, sliding_window=8),
    sliding=True,
    layer_path="model.layers",
    differs="sliding-window attention: a token attends to the last window only",
)
