"""Pretraining with parallel suppression (spec sections 9-10).

The suppression in training is the analysis :class:`~tlgeo.hooks.edits.Edit` (or, for
the learnable gate, the same update hook with a tensor ``s_par``) applied as
hooks on a ``TransformerBridge``; checkpoints export as ordinary HF directories
that :func:`tlgeo.load_model` boots.
"""

from .config import ARCHS, VARIANTS, ConfigError, ModelSpec, TrainConfig, hf_config
from .data import EmptyDataError, TokenStream, build_token_stream
from .loop import lr_factor, make_model, train
from .model import build_bridge, export_hf, load_tokenizer, load_trained
from .suppression import SuppressedLM, Suppression

__all__ = [
    "ARCHS",
    "VARIANTS",
    "ConfigError",
    "ModelSpec",
    "TrainConfig",
    "hf_config",
    "EmptyDataError",
    "TokenStream",
    "build_token_stream",
    "train",
    "lr_factor",
    "make_model",
    "build_bridge",
    "export_hf",
    "load_tokenizer",
    "load_trained",
    "SuppressedLM",
    "Suppression",
]
