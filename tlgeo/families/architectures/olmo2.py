"""OLMo 2: norms after attention and MLP only (no pre-norm)."""

from ..family import ATTN_TINY, Family

FAMILY = Family(
    "olmo2",
    "olmo2",
    "Olmo2Config",
    ATTN_TINY,
    post_norms=True,
    layer_path="model.layers",
    differs="norms after attention and MLP only (no pre-norm): the update is the normed output",
)
