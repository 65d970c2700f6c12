"""The model families tlgeo knows: one module per family (:mod:`tlgeo.families.architectures`),
listed once in :data:`FAMILY_MODULES`.

A :class:`Family` names a Hugging Face architecture (its ``model_type``) and the traits that
change what a site or an analysis means on it: the norm, parallel attention + MLP, norms after
the sublayers, mixture-of-experts MLPs, attention sinks, sliding-window layers, post-LN blocks,
no attention at all. :func:`family_of` finds a loaded model's (or a config's) family;
``tiny_config()`` builds the family's test model from transformers' own config class, small and
random, with the byte tokenizer's 258 ids (no download). :data:`FAMILIES`, :data:`SEED_CHECKPOINTS`
and :data:`SEED_FAMILIES` are views of the modules' records, built by :func:`build`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

from .architectures import (
    bloom,
    falcon,
    gemma2,
    gemma3,
    gpt2,
    gpt_neox,
    gpt_oss,
    llama,
    mamba,
    mistral,
    mixtral,
    olmo2,
    opt,
    opt_post_ln,
    phi3,
    qwen2,
    qwen3,
    qwen3_moe,
    tracr,
)
from .family import Family
from ..errors import InputError, UnknownNameError

__all__ = [
    "Family",
    "FAMILIES",
    "FAMILY_MODULES",
    "SEED_CHECKPOINTS",
    "SEED_FAMILIES",
    "build",
    "layer_paths",
    "get_family",
    "family_of",
    "family_of_config",
    "UnknownFamilyError",
]


class UnknownFamilyError(UnknownNameError, ValueError):
    """A family name (or model_type) that no family module declares."""


# the families, one line each, in the support matrix's order
FAMILY_MODULES: tuple[ModuleType, ...] = (
    llama,
    qwen2,
    qwen3,
    qwen3_moe,
    mistral,
    mixtral,
    gemma2,
    gemma3,
    gpt_oss,
    phi3,
    olmo2,
    gpt2,
    gpt_neox,
    opt,
    opt_post_ln,
    bloom,
    falcon,
    mamba,
    tracr,
)

FAMILIES: dict[str, Family] = {}  # name -> its module's FAMILY
SEED_CHECKPOINTS: dict[str, dict[str, Any]] = {}  # hub id -> its published config.json values (the families')
SEED_FAMILIES: dict[str, str] = {}  # hub id -> its family's name


def build(modules: tuple[ModuleType, ...] = FAMILY_MODULES) -> None:
    """Fill :data:`FAMILIES` and its views from the family modules (in place: importers see them)."""
    families: dict[str, Family] = {}
    checkpoints: dict[str, dict[str, Any]] = {}
    seed_families: dict[str, str] = {}
    for f in (m.FAMILY for m in modules):
        if f.name in families:
            raise InputError(f"two family modules declare {f.name!r}")
        families[f.name] = f
        for hub_id, config in f.checkpoints.items():
            if hub_id in checkpoints:
                raise InputError(f"{hub_id!r} is a seed checkpoint of {seed_families[hub_id]!r} and {f.name!r}")
            checkpoints[hub_id], seed_families[hub_id] = config, f.name
    for table, new in ((FAMILIES, families), (SEED_CHECKPOINTS, checkpoints), (SEED_FAMILIES, seed_families)):
        table.clear()
        table.update(new)


build()


def layer_paths() -> tuple[str, ...]:
    """Where the families' HF causal LMs keep their decoder layers (each path once)."""
    return tuple(dict.fromkeys(f.layer_path for f in FAMILIES.values()))


def get_family(name: str) -> Family:
    """The family called ``name`` (one name each: a Hugging Face ``model_type`` such as ``gemma3_text`` is
    matched by :func:`family_of_config`, a hub id such as ``EleutherAI/pythia-410m`` by its config)."""
    if str(name) not in FAMILIES:
        raise UnknownFamilyError(f"unknown model family {name!r}; known families: {', '.join(FAMILIES)}")
    return FAMILIES[str(name)]


def family_of_config(config: Any) -> Family | None:
    """The family of a Hugging Face config (object or ``config.json`` dict); ``None`` if tlgeo has none.

    Among the families of its ``model_type``, one whose ``when`` values the config has (post-LN OPT:
    ``do_layer_norm_before=False``) comes before one without."""
    get: Callable[[str, Any], Any] = config.get if isinstance(config, dict) else lambda k, d=None: getattr(config, k, d)
    model_type = get("model_type", None)
    candidates = [f for f in FAMILIES.values() if f.model_type == model_type]
    for f in sorted(candidates, key=lambda f: not f.when):
        if all(get(k, None) == v for k, v in f.when.items()):
            return f
    return None


def family_of(model: Any) -> Family | None:
    """The family of a loaded model (a bridge: its HF model's config) or of a config; ``None`` if unknown."""
    hf = getattr(model, "original_model", None)
    config = getattr(hf, "config", None) if hf is not None else model
    return None if config is None else family_of_config(config)
