"""Tiny random models of every family, built from transformers' own config classes (no download),
booted in the bridge in about a second: the unit tests' models."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from ..families import FAMILIES, UnknownFamilyError, get_family
from .bridge import boot, save_local
from .errors import UnknownModelError
from .tokenizer import byte_tokenizer

__all__ = ["TINY_KINDS", "tiny_config", "save_tiny_model", "tiny_model"]

TINY_KINDS = tuple(FAMILIES)  # every family (tlgeo.families), by its one name


def tiny_config(kind: str = "llama", **overrides):
    """A small HF config of the family ``kind`` (:data:`tlgeo.families.FAMILIES`: ``llama`` with
    RMSNorm, SwiGLU, GQA 4/2 heads and d_mlp 160, ``gpt_neox`` with LayerNorm and parallel
    attn+MLP, ``gpt2``, ``opt_post_ln``, ``mamba``, ...), built by transformers' own config class."""
    try:
        family = get_family(kind)
    except UnknownFamilyError:
        raise UnknownModelError(f"unknown tiny model kind {kind!r}; choose from {TINY_KINDS}") from None
    return family.tiny_config(**overrides)


def save_tiny_model(path: str | os.PathLike, kind: str = "llama", seed: int = 0, **overrides) -> Path:
    """Write a randomly initialised tiny model + byte tokenizer to ``path`` (HF format)."""
    from transformers import AutoModelForCausalLM

    from .bridge import register_families

    register_families()  # families whose HF classes are tlgeo's own (tracr)
    cfg = tiny_config(kind, **overrides)
    torch.manual_seed(seed)
    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    path = Path(path)
    save_local(hf, path)
    byte_tokenizer().save_pretrained(path)
    return path


def tiny_model(
    kind: str = "llama",
    seed: int = 0,
    *,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device | None = "cpu",
    device_map: str | dict | None = None,
    max_memory: dict | None = None,
    offload_folder: str | None = None,
    **overrides,
):
    """A tiny random model booted in the bridge (about a second), for unit tests; ``device_map``
    etc. shard it as :func:`load_model` does (its checkpoint folder then lives as long as the model)."""
    tiny_config(kind)  # an unknown kind fails here, before any file is written
    from transformers.utils import logging as hf_logging

    shard = {"device_map": device_map, "max_memory": max_memory, "offload_folder": offload_folder}
    sharded = any(v is not None for v in shard.values())
    folder = tempfile.TemporaryDirectory(prefix=f"tlgeo-tiny-{kind}-")
    try:
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # "Writing model shards" on every tiny model
        try:
            save_tiny_model(folder.name, kind, seed, **overrides)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        model = boot(folder.name, device, dtype, **shard)
    except BaseException:
        folder.cleanup()
        raise
    if sharded:  # offloaded weights may be read from the checkpoint files: keep them
        model.tlgeo_checkpoint = folder
    else:
        folder.cleanup()
    options = ([f"seed={seed}"] if seed else []) + [f"{k}={v}" for k, v in sorted(overrides.items())]
    model.tlgeo_name = f"tiny:{kind}" + (f"({','.join(options)})" if options else "")  # its label in result rows
    return model
