"""Mixtral: Mistral with mixture-of-experts MLPs."""

from ..family import ATTN_TINY, Family

FAMILY = Family(
    "mixtral",
    "mixtral",
    "MixtralConfig",
    dict(ATTN_TINY, num_local_experts=4, num_experts_per_tok=2),
    moe=True,
    layer_path="model.layers",
    differs="the MLP update is the router-weighted sum of the chosen experts' outputs",
)
