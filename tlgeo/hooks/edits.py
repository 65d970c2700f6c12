"""Component-scaling edits as TransformerLens hooks.

An :class:`Edit` says *what* to do (site, ``s_par``, ``s_perp``, which layers and
heads); :meth:`Edit.hooks` says *where*, for one model, as ``(hook_name, fn)``
pairs for ``model.run_with_hooks`` or ``model.hooks``::

    e = Edit("value_excl_self", s_par=0.0)        # blocks 1.. (block 0 is left alone by default)
    logits = model.run_with_hooks(tokens, fwd_hooks=e.hooks(model))
    with edit(model, "attn", s_par=0.5):
        loss = model(tokens, return_type="loss")

At the target hook the edited tensor is ``x + (y_hat - y)`` with
``y_hat = s_par y_par + s_perp y_perp`` (computed in float32/64), so the update
``y`` is replaced and everything else in ``x`` (the self message, the residual
input) is kept. The no-op ``(1, 1)`` returns ``x`` itself.

Every edit, in the API as on the command line, leaves block 0 alone unless ``skip_first=0``
(:data:`SKIP_FIRST`, as the reference code's sweeps do).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

import torch
from torch import Tensor

from ..errors import InputError
from ..geometry.parallel import Scale, is_unit, check_scale, scaled_delta
from .adapter import HookList, resolve_heads, resolve_layers, site_hooks
from .sites import Site, get_site
from ..geometry.value_space import scale_diagonal
from .intervention import intervene

__all__ = ["Edit", "edit_hooks", "edit", "scale_update", "SKIP_FIRST"]

SKIP_FIRST = 1  # the one default of every edit, API and command line: blocks 0..SKIP_FIRST-1 are left alone


@dataclass(frozen=True)
class Edit:
    """Scale the parallel and perpendicular parts of the update at ``site``.

    ``layers``: block indices (``None``: all); ``skip_first``: leave blocks
    ``0..skip_first-1`` alone (default :data:`SKIP_FIRST` = 1: block 0 is never edited unless
    ``skip_first=0``); ``heads``: query heads (per-head sites only).
    For the ``diag`` site ``s_par`` scales ``A_tt`` (0 removes it) and
    ``s_perp`` must be 1.
    """

    site: str | Site
    s_par: Scale = 1.0
    s_perp: Scale = 1.0
    layers: int | tuple[int, ...] | None = None
    skip_first: int = SKIP_FIRST
    heads: int | tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "site", get_site(self.site))
        object.__setattr__(self, "s_par", check_scale(self.s_par, "s_par"))
        object.__setattr__(self, "s_perp", check_scale(self.s_perp, "s_perp"))
        for name in ("layers", "heads"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, int):
                object.__setattr__(self, name, tuple(v))
        if not self.site.is_decomposition and not is_unit(self.s_perp):
            raise InputError(f"site {self.site.name!r} has no perpendicular part: s_perp must be 1")

    @property
    def is_noop(self) -> bool:
        return is_unit(self.s_par) and is_unit(self.s_perp)

    def hooks(self, model) -> HookList:
        """``(hook_name, fn)`` pairs for ``model``; validates layers and heads first."""
        cfg = model.cfg
        resolve_layers(cfg, self.layers, self.skip_first)
        head_mask = resolve_heads(cfg, self.site, self.heads)
        if self.site.is_decomposition:
            fn = scale_update(self.site, self.s_par, self.s_perp, head_mask)
        else:
            fn = _scale_diagonal(self.s_par, head_mask)
        return site_hooks(model, self.site, fn, self.layers, self.skip_first)

    def describe(self) -> dict:
        """Plain-value description (for DataFrames and JSON)."""
        return {
            "site": self.site.name,
            "s_par": _plain(self.s_par),
            "s_perp": _plain(self.s_perp),
            "layers": "all" if self.layers is None else self.layers,
            "skip_first": self.skip_first,
            "heads": "all" if self.heads is None else self.heads,
        }


def _plain(s: Scale):
    return s if not isinstance(s, Tensor) else "tensor"


def scale_update(site: Site, s_par: Scale, s_perp: Scale, head_mask: Tensor | None):
    """The update callback of :func:`~tlgeo.hooks.adapter.site_hooks` that rescales ``site``'s
    parallel / perpendicular parts (``head_mask``: per-head sites only; ``None`` = all)."""
    noop = is_unit(s_par) and is_unit(s_perp)

    def on_target(layer: int, x: Tensor, reads: Mapping[str, Tensor]) -> Tensor:
        if noop:
            return x
        y, ref = site.decompose(x, reads)
        sp, sq = _per_vector(s_par, x, y), _per_vector(s_perp, x, y)
        delta = scaled_delta(y, ref, sp, sq).reshape(x.shape)
        if head_mask is not None:  # per-head sites: [..., head, d_head]
            delta = delta * head_mask.to(delta.device, delta.dtype)[:, None]
        return (x.to(delta.dtype) + delta).to(x.dtype)

    return on_target


def _per_vector(s: Scale, x: Tensor, y: Tensor) -> Scale:
    """A tensor scale given per vector of the target (``x.shape[:-1]``, broadcastable)
    laid out per vector of ``y`` (which may group heads by KV head)."""
    if not isinstance(s, Tensor) or s.dim() == 0 or y.shape == x.shape:
        return s
    return s.expand(x.shape[:-1]).reshape(y.shape[:-1])


def _scale_diagonal(s: Scale, head_mask: Tensor | None):
    noop = is_unit(s)

    def on_target(layer: int, pattern: Tensor, reads: Mapping[str, Tensor]) -> Tensor:
        if noop:
            return pattern
        new = scale_diagonal(pattern, s)
        if head_mask is not None:  # [batch, head, q, k]
            new = torch.where(head_mask.to(new.device)[:, None, None], new, pattern)
        return new

    return on_target


def edit_hooks(
    model,
    site: str | Site,
    s_par: Scale = 1.0,
    s_perp: Scale = 1.0,
    *,
    layers: int | Iterable[int] | None = None,
    skip_first: int = SKIP_FIRST,
    heads: int | Iterable[int] | None = None,
) -> HookList:
    """Hooks for one edit (see :class:`Edit`), ready for ``run_with_hooks``."""
    return Edit(site, s_par, s_perp, layers, skip_first, heads).hooks(model)


@contextmanager
def edit(model, *edits: Edit | str, **kwargs) -> Iterator[object]:
    """Apply edits for the duration of a ``with`` block; hooks are removed on exit or error.

    ``edit(model, Edit(...), Edit(...))`` composes several edits;
    ``edit(model, "attn", s_par=0)`` builds one from keyword arguments.
    """
    if len(edits) == 1 and not isinstance(edits[0], Edit):
        edits = (Edit(edits[0], **kwargs),)
    elif kwargs:
        raise TypeError("pass keyword arguments only with a single site name")
    with intervene(model, *edits):
        yield model
