"""Parallel suppression in training: the analysis :class:`~tlgeo.hooks.edits.Edit`, as hooks.

Variants (``s_par = 0`` applied in every forward, training and evaluation alike):

| variant | what | hooks |
|---|---|---|
| ``none`` | baseline | — |
| ``value_full`` | value space, full aggregate ``o_t`` per head before W_O, vs its KV head's ``v_t`` (GQA-correct) | ``Edit("value_full", s_par=0)`` |
| ``attn`` | residual-space attention output vs ``resid_pre`` | ``Edit("attn", s_par=0)`` |
| ``value_excl_self`` | value space, exclude-self (the self message ``A_tt v_t`` is kept) | ``Edit("value_excl_self", s_par=0)`` |
| ``gate`` | learnable removal on ``gate_site`` (default ``value_full``) | the same update hook with a tensor ``s_par`` |

Gate sign convention: ``g = sigmoid(x W_L + b_L)`` with ``x`` the raw block
input (``hook_resid_pre``) of block ``L``, one ``g`` per token and head
(per token for residual sites). ``g`` is the **fraction of the parallel part
removed**: the edit uses ``s_par = 1 - g`` (``g -> 1`` is full removal, ``g -> 0``
the unedited model). This is the reference code's effective convention
(``s_par = 1 - sigmoid(...)``). ``W`` starts at 0 and ``b`` at
``gate_bias_init`` (0: half the parallel part removed at initialisation).

Every variant goes through :func:`tlgeo.hooks.adapter.site_hooks` and the update
callback of :mod:`tlgeo.hooks.edits`, so training and analysis share one
implementation of the geometry, and gradients flow through it.
"""  # noqa: E501

from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..hooks.edits import Edit, scale_update
from ..hooks.adapter import HookList, resolve_layers, site_hooks
from ..hooks.sites import get_site
from .config import VARIANTS, ConfigError

__all__ = ["Suppression", "SuppressedLM", "FIXED_SITES"]

FIXED_SITES = {"value_full": "value_full", "attn": "attn", "value_excl_self": "value_excl_self"}


class Suppression(nn.Module):
    """A suppression variant for a model with config ``cfg`` (a bridge's ``cfg``).

    Holds the gate's parameters (``gate_w [n_layers, d_model, k]``, ``gate_b [n_layers, k]``,
    ``k`` = heads for per-head sites, else 1) when ``variant == "gate"``.
    """

    def __init__(
        self, variant: str, cfg, *, skip_first: int = 0, gate_site: str = "value_full", gate_bias_init: float = 0.0
    ):
        super().__init__()
        if variant not in VARIANTS:
            raise ConfigError(f"unknown suppression variant {variant!r}; choose from {VARIANTS}")
        self.variant, self.skip_first = variant, skip_first
        self.layers = resolve_layers(cfg, None, skip_first)
        self.site = get_site(FIXED_SITES.get(variant, gate_site))
        if variant == "gate":
            if not self.site.is_decomposition:
                raise ConfigError(f"the gate needs a decomposition site, got {gate_site!r}")
            k = cfg.n_heads if self.site.per_head else 1
            self.gate_w = nn.Parameter(torch.zeros(cfg.n_layers, cfg.d_model, k))
            self.gate_b = nn.Parameter(torch.full((cfg.n_layers, k), float(gate_bias_init)))

    def edit(self) -> Edit | None:
        """The analysis edit of a fixed variant (``None`` for ``none`` and ``gate``)."""
        if self.variant in FIXED_SITES:
            return Edit(self.site, s_par=0.0, skip_first=self.skip_first)
        return None

    def describe(self) -> dict:
        return {
            "variant": self.variant,
            "site": None if self.variant == "none" else self.site.name,
            "s_par": 0.0 if self.variant in FIXED_SITES else ("1 - gate" if self.variant == "gate" else 1.0),
            "skip_first": self.skip_first,
        }

    def gate(self, layer: int, x: Tensor) -> Tensor:
        """Removal fraction ``g = sigmoid(x W_L + b_L)``, ``[batch, pos, k]`` (float32)."""
        return torch.sigmoid(x.float() @ self.gate_w[layer].float() + self.gate_b[layer].float())

    def hooks(self, model) -> HookList:
        """``(hook_name, fn)`` pairs for ``model`` (a ``TransformerBridge``)."""
        if self.variant == "none":
            return []
        if self.variant != "gate":
            return self.edit().hooks(model)
        hooks: HookList = []
        for layer in self.layers:
            stash: dict[str, Tensor] = {}

            def read_x(x: Tensor, hook, _stash=stash) -> None:
                _stash["x"] = x

            def on_target(l: int, t: Tensor, reads: Mapping[str, Tensor], _stash=stash) -> Tensor:
                g = self.gate(l, _stash.pop("x"))  # [b, pos, k]
                s_par = 1.0 - (g if self.site.per_head else g[..., 0])
                return scale_update(self.site, s_par, 1.0, None)(l, t, reads)

            hooks.append((f"blocks.{layer}.hook_resid_pre", read_x))
            hooks += site_hooks(model, self.site, on_target, layers=[layer])
        return hooks


class SuppressedLM(nn.Module):
    """A bridge trained with a suppression variant: ``forward(tokens) -> mean next-token loss``.

    ``tokens``: int64 ``[batch, seq+1]``; the loss is cross-entropy of
    ``logits[:, :-1]`` against ``tokens[:, 1:]``, in float32. The bridge's
    parameters are the HF model's parameters, so training it trains the HF model.
    """

    def __init__(self, bridge, suppression: Suppression):
        super().__init__()
        self.bridge = bridge
        self.suppression = suppression

    def logits(self, inputs: Tensor) -> Tensor:
        """Logits ``[batch, pos, vocab]`` with the suppression active."""
        hooks = self.suppression.hooks(self.bridge)
        if not hooks:
            return self.bridge(inputs, return_type="logits")
        with self.bridge.hooks(fwd_hooks=hooks):
            return self.bridge(inputs, return_type="logits")

    def forward(self, tokens: Tensor) -> Tensor:
        logits = self.logits(tokens[:, :-1])
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
