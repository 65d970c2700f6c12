"""Phi-3: Llama with fused qkv and gate_up projections."""

from ..family import ATTN_TINY, Family

FAMILY = Family(
    "phi3",
    "phi3",
    "Phi3Config",
    ATTN_TINY,
    layer_path="model.layers",
    differs="as Llama, with fused qkv and gate_up projections",
)
