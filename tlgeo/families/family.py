"""What a family module declares: :class:`Family` (one architecture, its traits, tiny config, seed
checkpoints, layer path, own support cells and workarounds) and :class:`Support` (one cell of the
support matrix). The families themselves are the modules of :mod:`tlgeo.families.architectures`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["Family", "Support", "ATTN_TINY"]


@dataclass(frozen=True)
class Support:
    """One cell of the support matrix."""

    status: str  # "yes", "differs" (supported, the difference written in ``why``), "no" (refused: ``why``)
    why: str = ""

    @property
    def ok(self) -> bool:
        return self.status != "no"

    def cell(self) -> str:
        return {"yes": "yes", "differs": "yes*", "no": "no"}[self.status]


@dataclass(frozen=True)
class Family:
    """One architecture family: the traits that change what tlgeo's quantities mean on it, and the
    rest tlgeo needs of it (its tiny model, the seed papers' checkpoints, where HF keeps its layers)."""

    name: str
    model_type: str  # the HF config's model_type
    config_class: str  # transformers' config class of its tiny model (or ``module:Class``: tlgeo's own)
    tiny: dict  # that class's keyword arguments: small sizes
    norm: str = "RMSNorm"  # or "LayerNorm", "none"
    positions: str = "rotary"  # rotary, absolute, alibi, none
    attention: bool = True  # attention and MLP sublayers (Mamba: a mixer only)
    parallel: bool = False  # attention and MLP both read resid_pre (GPT-NeoX, Falcon)
    post_norms: bool = False  # a norm after the attention / MLP output, before the residual add
    moe: bool = False  # mixture-of-experts MLPs
    sinks: bool = False  # a learned sink logit per head: pattern rows sum to less than 1
    sliding: bool = False  # sliding-window attention layers
    post_ln: bool = False  # the residual is renormalised after each add (OPT-350m)
    compiled: bool = False  # weights compiled from a program (tracr), not trained: plain fc_in / fc_out MLPs
    start_at_layer_ok: bool = True  # TransformerLens 4.3's start_at_layer works (not: Bloom's ALiBi, OPT's project_in)
    when: Mapping[str, Any] = field(default_factory=dict)  # config values that pick this family among its model_type's
    layer_path: str = "model.layers"  # where the HF causal LM keeps its decoder layers
    checkpoints: Mapping[str, dict] = field(default_factory=dict)  # the seed papers' models: hub id -> config.json
    support: Mapping[str, Support] = field(default_factory=dict)  # cells of its own, before the traits' rules
    workarounds: str = ""  # module of its TransformerLens fixes (``during_boot``, ``after_boot``), for models.bridge
    differs: str = ""  # one line: what differs from the papers' setting

    @property
    def seed_models(self) -> tuple[str, ...]:
        """The seed papers' models of this family (hub ids)."""
        return tuple(self.checkpoints)

    def tiny_config(self, **overrides: Any):
        """The family's tiny random-model config (transformers' own class, no download)."""
        kwargs = {**_TOKENS, **self.tiny, **overrides}
        return config_class(self.config_class)(**kwargs)


def config_class(name: str):
    """A config class by name: transformers' own (``LlamaConfig``), or ``module:Class`` for one of tlgeo's
    (``tlgeo.families.tracr_config:TracrConfig``)."""
    if ":" in name:
        from importlib import import_module

        module, _, cls = name.partition(":")
        return getattr(import_module(module), cls)
    import transformers

    return getattr(transformers, name)


_TOKENS = dict(vocab_size=258, bos_token_id=256, eos_token_id=257, pad_token_id=257)
# the tiny sizes of a Llama-style config
ATTN_TINY = dict(
    hidden_size=64,
    intermediate_size=160,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
