"""Thin hook adapters: turn a :class:`~tlgeo.hooks.sites.Site` into TransformerLens hooks.

:func:`site_hooks` is the one piece of plumbing. For every chosen block it
registers a read hook on each of the site's reference hooks, which keeps the
tensor until the target hook of the same block fires in the same forward; the
target hook then hands ``(layer, tensor, reads)`` to a callback and forgets the
reads. Edits (:mod:`tlgeo.hooks.edits`) and observations (:mod:`tlgeo.decomposition.observe`) are
callbacks on top of it; nothing is kept after the forward.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Optional

import torch
from torch import Tensor

from ..errors import InputError, OutOfRangeError, UnknownNameError, spans
from ..families import SITE_COLUMNS, UnsupportedError, check_support
from .sites import Site, get_site

__all__ = ["HookList", "site_hooks", "resolve_layers", "resolve_heads", "check_hook_names", "pattern_is_live"]

HookFn = Callable[[Tensor, object], Optional[Tensor]]
HookList = list[tuple[str, HookFn]]
TargetFn = Callable[[int, Tensor, Mapping[str, Tensor]], Optional[Tensor]]


def resolve_layers(cfg, layers: int | Iterable[int] | None = None, skip_first: int = 0) -> list[int]:
    """Sorted, de-duplicated block indices; ``None`` means every block.

    ``skip_first`` drops blocks ``0 .. skip_first-1`` (the reference code skips
    block 0 in its sweeps). Out-of-range indices raise ``IndexError``.
    """
    n = cfg.n_layers
    if not isinstance(skip_first, int) or skip_first < 0:
        raise InputError(f"skip_first must be a non-negative integer, got {skip_first!r}")
    if layers is None:
        chosen = list(range(n))
    else:
        chosen = [layers] if isinstance(layers, int) else list(layers)
        bad = [l for l in chosen if not isinstance(l, int) or not 0 <= l < n]
        if bad:
            raise OutOfRangeError(f"layer(s) {spans(bad)} out of range: the model has {n} layers (0..{n - 1})")
    out = sorted({l for l in chosen if l >= skip_first})
    if not out:
        hint = (
            (f"; blocks 0..{skip_first - 1} are left alone by default: give skip_first=0 (--skip-first 0) to edit them")
            if skip_first and layers is not None
            else ""
        )
        raise InputError(f"no layers left to edit (layers={layers!r}, skip_first={skip_first}){hint}")
    return out


def resolve_heads(cfg, site: Site, heads: int | Iterable[int] | None) -> Tensor | None:
    """Boolean mask ``[n_heads]`` of the chosen heads, or ``None`` for all."""
    if heads is None:
        return None
    if not site.per_head:
        raise InputError(
            f"site {site.name!r} acts on the whole residual vector; heads apply only to "
            f"per-head sites (value_full, value_excl_self, diag)"
        )
    n = cfg.n_heads
    chosen = [heads] if isinstance(heads, int) else list(heads)
    bad = [h for h in chosen if not isinstance(h, int) or not 0 <= h < n]
    if bad:
        raise OutOfRangeError(f"head(s) {spans(bad)} out of range: the model has {n} heads (0..{n - 1})")
    mask = torch.zeros(n, dtype=torch.bool)
    mask[chosen] = True
    return mask


def check_hook_names(model, names: Iterable[str]) -> None:
    """Raise ``KeyError`` naming any hook the model does not have."""
    have = model.hook_dict  # built afresh on each access by TransformerBridge: read it once
    missing = [n for n in names if n not in have]
    if missing:
        raise UnknownNameError(f"the model has no hook(s) {missing}")


def pattern_is_live(model, layer: int = 0) -> bool:
    """Whether block ``layer``'s ``attn.hook_pattern`` fires inside the attention, before the heads'
    outputs (edits to it act), rather than post hoc from the weights the HF module returns (the bridge's
    generic attention; :func:`tlgeo.models.load_model` makes OPT's live)."""
    from transformer_lens.model_bridge.generalized_components import AttentionBridge

    attn = model.blocks[layer].attn
    if not isinstance(attn, AttentionBridge):
        return True  # a HookedTransformer
    inner = attn.original_component
    return (
        type(attn).forward is not AttentionBridge.forward
        or bool(getattr(inner, "accepts_pattern_fn", False))
        or getattr(inner, "tlgeo_hook_pattern", None) is not None
    )


def site_hooks(
    model,
    site: str | Site,
    on_target: TargetFn,
    layers: int | Iterable[int] | None = None,
    skip_first: int = 0,
) -> HookList:
    """``(hook_name, fn)`` pairs that call ``on_target(layer, tensor, reads)`` at the target.

    ``reads`` maps the site's roles (``"ref"``, ``"v"``, ``"pattern"``) to the
    tensors read earlier in the same forward. ``on_target`` returns the new
    target tensor, or ``None`` to leave it as it is.
    """
    site = get_site(site)
    if site.name in SITE_COLUMNS:  # a registered site the family refuses fails here, with the reason
        check_support(model, site.name)
    cfg = model.cfg
    hooks: HookList = []
    chosen = resolve_layers(cfg, layers, skip_first)
    roles = site.read_hooks(model)
    if "attn.hook_pattern" in (site.target, *(h for _, h in roles)) and not pattern_is_live(model, chosen[0]):
        raise UnsupportedError(
            f"{site.name} on {getattr(cfg, 'architecture', 'this model')}: the bridge fires its "
            "attention pattern after the heads' outputs, so the pattern is not known (or "
            "editable) where the site acts"
        )
    check_hook_names(model, [f"blocks.{l}.{h}" for l in chosen for h in (*(s for _, s in roles), site.target)])
    for layer in chosen:
        names = {role: f"blocks.{layer}.{suffix}" for role, suffix in roles}
        target = f"blocks.{layer}.{site.target}"
        stash: dict[str, Tensor] = {}

        for role, name in names.items():

            def read(tensor: Tensor, hook, _role: str = role, _stash=stash) -> None:
                _stash[_role] = tensor

            hooks.append((name, read))

        def at_target(tensor: Tensor, hook, _layer: int = layer, _stash=stash, _roles=tuple(names)):
            missing = [r for r in _roles if r not in _stash]
            if missing:
                raise RuntimeError(
                    f"{site.name} at block {_layer}: the read hook(s) for {missing} did not fire "
                    f"before {hook.name} in this forward"
                )
            reads = {r: _stash.pop(r) for r in _roles}
            return on_target(_layer, tensor, reads)

        hooks.append((target, at_target))
    return hooks
