"""Post-LN OPT (OPT-350m, ``do_layer_norm_before=False``): the residual renormalised after each add."""

from ..family import Family
from .opt import TINY, WORKAROUNDS, checkpoint

FAMILY = Family(
    "opt_post_ln",
    "opt",
    "OPTConfig",
    dict(TINY, word_embed_proj_dim=32, do_layer_norm_before=False, init_std=0.2),  # updates that show
    norm="LayerNorm",
    positions="absolute",
    post_ln=True,
    start_at_layer_ok=False,
    when={"do_layer_norm_before": False},
    checkpoints={"facebook/opt-350m": checkpoint(1024, 4096, 16, pre_ln=False, proj=512)},
    layer_path="model.decoder.layers",
    workarounds=WORKAROUNDS,
    differs="post-LN: the residual is renormalised after each add, so the state an update is added to "
    "is not the state the next sublayer reads",
)
