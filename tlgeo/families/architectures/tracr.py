"""tracr: RASP programs compiled to transformer weights (Lindner et al. 2023); no norm, one-hot embeddings,
learned absolute positions, ReLU MLPs, causal or bidirectional attention as the program was compiled.

Its config class is tlgeo's own (:mod:`tlgeo.families.tracr_config`), its model :mod:`tlgeo.models.tracr` (also its
boot hook, which registers both with transformers and TransformerLens). The compiled programs are in the zoo
(``zoo/tracr-<program>/``, written by ``scripts/compile_tracr.py``); the tiny model is a random causal one."""

from ..family import Family

_COMPILED = (
    "a compiled program reads only its own residual directions and puts out its output space's "
    "coordinates, not next-token logits over its vocabulary"
)

FAMILY = Family(
    "tracr",
    "tracr",
    "tlgeo.families.tracr_config:TracrConfig",
    dict(
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        head_dim=16,
        intermediate_size=160,
        max_position_embeddings=256,
        causal=True,
        initializer_range=0.1,
    ),
    norm="none",
    positions="absolute",
    layer_path="model.layers",
    compiled=True,
    workarounds="tlgeo.models.tracr",
    differs="no norm (identity ln1/ln2/ln_f), learned absolute positions, ReLU MLPs; the compiled zoo programs "
    "may be bidirectional, and " + _COMPILED,
)
