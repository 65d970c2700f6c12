"""Booting a Hugging Face model as a TransformerLens bridge with raw weights (each family's
workarounds applied: :mod:`tlgeo.models.opt`), and saving an HF folder from any rank."""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch

from . import opt

__all__ = ["boot", "save_local"]


def save_local(hf, path: str | os.PathLike) -> None:
    """``hf.save_pretrained(path)`` on this process whatever its torch.distributed rank:
    transformers writes nothing on ranks other than 0 once a process group exists, but a
    folder this process boots from (a converted or tiny model) is its own."""
    hf.should_save_on_this_rank = lambda is_main_process=True: is_main_process
    try:
        hf.save_pretrained(path)
    finally:
        del hf.should_save_on_this_rank


def boot(name_or_dir: str, device: str | torch.device, dtype: torch.dtype, **shard: Any):
    """A bridge over the HF model in ``name_or_dir`` (a folder or a hub id) on ``device`` in ``dtype``
    (or sharded by accelerate: ``shard`` holds ``device_map``, ``max_memory``, ``offload_folder``),
    with raw weights and the family's workarounds applied, in eval mode."""
    from transformer_lens.model_bridge import TransformerBridge

    from transformers.utils import logging as hf_logging

    shard = {k: v for k, v in shard.items() if v is not None}
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the per-tensor "Loading weights" bar, on every load
    try:
        with warnings.catch_warnings(), opt.post_ln_final_norm():
            warnings.simplefilter("ignore")
            bridge = TransformerBridge.boot_transformers(name_or_dir, device=None if shard else device, dtype=dtype,
                                                         trust_remote_code=False, **shard)  # never a model's own code
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    opt.post_ln_blocks(bridge)
    opt.live_pattern(bridge)
    bridge.eval()
    return bridge
