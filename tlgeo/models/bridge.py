"""Booting a Hugging Face model as a TransformerLens bridge with raw weights (each family's
workarounds applied: the module its record names, e.g. :mod:`tlgeo.models.opt`), and saving an HF
folder from any rank."""

from __future__ import annotations

import os
import types
import warnings
from contextlib import ExitStack
from importlib import import_module
from typing import Any

import torch

from ..families import FAMILIES, family_of
from .placement import input_device

__all__ = ["boot", "save_local", "inputs_follow_model", "is_bridge", "register_families"]

_MOVED_KWARGS = ("input", "input_ids", "attention_mask", "position_ids")


def is_bridge(model) -> bool:
    """A TransformerLens bridge (or a model with its hook API), not a bare HF model."""
    return hasattr(model, "run_with_cache") and hasattr(model, "blocks")


def inputs_follow_model(bridge) -> None:
    """Token ids (and masks, position ids) handed to ``bridge`` as tensors on another device go to its
    input device (:func:`tlgeo.models.placement.input_device`) at every entry: ``bridge(ids)``,
    ``run_with_hooks`` and ``run_with_cache`` (all call the instance's ``forward``). HookedTransformer
    moved them; the bridge moves text only, so ids made on the CPU fail in a GPU model's embedding.
    Idempotent; text and tensors already there pass untouched; a deep copy of the bridge moves to its own."""
    if "forward" in vars(bridge):
        return  # already wrapped (or a forward of the caller's own: left alone)
    # a method bound to the bridge (copy.deepcopy binds it to the copy), set with object.__setattr__: the
    # bridge's own __setattr__ forwards assignments to the wrapped HF model
    object.__setattr__(bridge, "forward", types.MethodType(_forward_on_input_device, bridge))


def _move(x: Any, device: torch.device) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) and x.device != device else x


def _forward_on_input_device(self, *args: Any, **kwargs: Any) -> Any:
    """The class's ``forward`` with the ids and masks on the model's input device."""
    device = input_device(self)  # never "meta": offloaded weights are skipped
    args = (_move(args[0], device), *args[1:]) if args else args
    kwargs = {k: _move(v, device) if k in _MOVED_KWARGS else v for k, v in kwargs.items()}
    return type(self).forward(self, *args, **kwargs)


def save_local(hf, path: str | os.PathLike) -> None:
    """``hf.save_pretrained(path)`` on this process whatever its torch.distributed rank:
    transformers writes nothing on ranks other than 0 once a process group exists, but a
    folder this process boots from (a converted or tiny model) is its own."""
    hf.should_save_on_this_rank = lambda is_main_process=True: is_main_process
    try:
        hf.save_pretrained(path)
    finally:
        del hf.should_save_on_this_rank


def _workarounds() -> list[types.ModuleType]:
    """The families' workaround modules (``Family.workarounds``), each once."""
    return [import_module(name) for name in dict.fromkeys(f.workarounds for f in FAMILIES.values() if f.workarounds)]


def register_families() -> None:
    """Architectures tlgeo itself teaches transformers and TransformerLens (tracr's): each workaround module's
    ``register()``, where it has one, before a folder's config is read or a tiny model is built."""
    for module in _workarounds():
        register = getattr(module, "register", None)
        if register is not None:
            register()


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
        with warnings.catch_warnings(), ExitStack() as patches:
            for module in _workarounds():  # the family is known only once booted: every family's patches
                patches.enter_context(module.during_boot())
            warnings.simplefilter("ignore")
            bridge = TransformerBridge.boot_transformers(
                name_or_dir, device=None if shard else device, dtype=dtype, trust_remote_code=False, **shard
            )  # never a model's own code
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    family = family_of(bridge)
    if family is not None and family.workarounds:
        import_module(family.workarounds).after_boot(bridge)
    inputs_follow_model(bridge)
    bridge.eval()
    return bridge
