"""OPT (pre-LN): LayerNorm and learned absolute positions; TransformerLens's OPT adapter mended by
:mod:`tlgeo.models.opt` (named here, applied by :func:`tlgeo.models.bridge.boot`)."""

from typing import Any

from ..family import Family

TINY = dict(
    hidden_size=64,
    ffn_dim=160,
    num_hidden_layers=3,
    num_attention_heads=4,
    max_position_embeddings=256,
    word_embed_proj_dim=64,
)
WORKAROUNDS = "tlgeo.models.opt"


def checkpoint(hidden: int, ffn: int, heads: int, pre_ln: bool, proj: int) -> dict[str, Any]:
    """An OPT model's published config.json values."""
    return {
        "model_type": "opt",
        "architectures": ["OPTForCausalLM"],
        "hidden_size": hidden,
        "ffn_dim": ffn,
        "num_hidden_layers": 24,
        "num_attention_heads": heads,
        "activation_function": "relu",
        "do_layer_norm_before": pre_ln,
        "_remove_final_layer_norm": False,
        "word_embed_proj_dim": proj,
        "max_position_embeddings": 2048,
        "vocab_size": 50272,
    }


FAMILY = Family(
    "opt",
    "opt",
    "OPTConfig",
    TINY,
    norm="LayerNorm",
    positions="absolute",
    checkpoints={"facebook/opt-1.3b": checkpoint(2048, 8192, 32, pre_ln=True, proj=2048)},
    layer_path="model.decoder.layers",
    workarounds=WORKAROUNDS,
    differs="LayerNorm and learned absolute positions",
)
