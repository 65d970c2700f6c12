"""Qwen2: Llama with biases on q, k and v."""

from ..family import ATTN_TINY, Family

FAMILY = Family(
    "qwen2", "qwen2", "Qwen2Config", ATTN_TINY, layer_path="model.layers", differs="as Llama, with biases on q, k and v"
)
