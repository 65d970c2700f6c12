"""L2-matched perturbations as TransformerLens hooks (direction vs magnitude).

A :class:`Perturbation` moves every token state at its site (by default
``blocks.L.hook_resid_post`` of the middle third of the blocks) by ``delta``:
along its own direction (``kind="magnitude"``) or by turning it
(``kind="angle"``). The math is :mod:`tlgeo.geometry.perturb`; this module only
draws the randomness and attaches it through :func:`~tlgeo.hooks.adapter.site_hooks`.

Randomness, by ``mode``:

* ``"exact"`` (default): every token moves by exactly ``delta`` (the angle by
  :func:`~tlgeo.geometry.perturb.rotate_exact`). Signs and directions come from
  a generator seeded by ``(seed, layer)`` at every forward, so the same seed
  and the same inputs give the same perturbation in every run, repaired or not.
* ``"faithful"``: the reference notebook: one Gaussian direction per tensor
  shape, drawn once per :meth:`Perturbation.hooks` call and reused across layers
  and inputs of that shape; the angle by the notebook's bisection on the mean
  displacement; magnitude signs redrawn at every forward.

``relative=True`` reads ``delta`` as a fraction of each token's norm
(``delta * ||h||``; in faithful angle mode, of the mean norm of the tensor).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import torch
from torch import Tensor

from ..errors import InputError
from ..geometry.perturb import (
    FLIPS,
    check_delta,
    magnitude_perturb,
    random_directions,
    random_signs,
    rotate_exact,
    rotate_faithful,
)
from .adapter import HookList, resolve_layers, site_hooks
from .sites import Site, get_site

__all__ = ["KINDS", "MODES", "RESID_POST", "Perturbation", "middle_third"]

KINDS = ("magnitude", "angle")
MODES = ("exact", "faithful")

RESID_POST = Site(
    "resid_post",
    "hook_resid_post",
    (),
    False,
    None,
    "the residual stream after block L (where the perturbations act by default)",
)


def middle_third(n_layers: int) -> list[int]:
    """The middle third of the blocks (Pythia-410M's 8..15 of 24); at least one block."""
    lo, hi = n_layers // 3, (2 * n_layers) // 3
    return list(range(lo, max(hi, lo + 1)))


@dataclass(frozen=True)
class Perturbation:
    """Move every token at ``site`` in ``layers`` by ``delta``, along (magnitude) or across (angle) it.

    ``layers=None``: :func:`middle_third`. ``flip`` (magnitude): what a shrink
    larger than the norm does, see :func:`tlgeo.geometry.perturb.magnitude_perturb`.
    ``site``: ``RESID_POST`` or any registered site (its target tensor is perturbed,
    one vector per token and, for per-head sites, per head).
    """

    kind: str
    delta: float
    seed: int = 42
    layers: int | tuple[int, ...] | None = None
    mode: str = "exact"
    relative: bool = False
    flip: str = "allow"
    site: str | Site = field(default=RESID_POST)
    draw: int = 0  # exact mode: mixed into the (seed, layer) draw, e.g. a batch's first row, so that batches
    #                of one shape get their own signs and directions (0: the (seed, layer) draw of every forward)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InputError(f"unknown perturbation kind {self.kind!r}; choose from {KINDS}")
        if self.mode not in MODES:
            raise InputError(f"unknown perturbation mode {self.mode!r}; choose from {MODES}")
        if self.flip not in FLIPS:
            raise InputError(f"unknown flip {self.flip!r}; choose from {FLIPS}")
        object.__setattr__(
            self, "delta", check_delta(float(self.delta) if not isinstance(self.delta, Tensor) else self.delta)
        )
        if isinstance(self.layers, Iterable) and not isinstance(self.layers, tuple):
            object.__setattr__(self, "layers", tuple(self.layers))
        if isinstance(self.draw, bool) or not isinstance(self.draw, int) or self.draw < 0:
            raise InputError(f"draw must be a non-negative integer, got {self.draw!r}")
        self.target_site()  # an unknown site fails here

    def target_site(self) -> Site:
        """``RESID_POST`` (also by its name) or the registered site named ``site``."""
        return RESID_POST if self.site in ("resid_post", RESID_POST) else get_site(self.site)

    def chosen_layers(self, cfg) -> list[int]:
        return resolve_layers(cfg, middle_third(cfg.n_layers) if self.layers is None else self.layers)

    def hooks(self, model, stats: list[dict] | None = None) -> HookList:
        """TransformerLens ``(name, fn)`` pairs; ``stats`` (optional) gets one row per layer and
        forward: ``layer, n_tokens, median_norm, mean_displacement, n_clipped`` (tokens not moved as
        asked), ``n_flipped`` (magnitude, ``flip="allow"``: shrinks past 0 that flipped the state)."""
        layers = self.chosen_layers(model.cfg)
        faithful_noise: dict[tuple, Tensor] = {}  # faithful: one direction per tensor shape, this call
        faithful_gen = torch.Generator().manual_seed(self.seed)

        def on_target(layer: int, h: Tensor, reads) -> Tensor:
            if self.mode == "exact":
                gen = torch.Generator().manual_seed(self.seed * 1_000_003 + layer + self.draw * 7_919_000_011)
            else:
                gen = faithful_gen
            norms = h.detach().float().norm(dim=-1)
            delta = self.delta * norms.to(h.device) if self.relative else self.delta
            flipped = 0
            if self.kind == "magnitude":
                signs = random_signs(h.shape[:-1], gen).to(h.device)
                new, clipped = magnitude_perturb(h, delta, signs, flip=self.flip)
                if self.flip == "allow":  # the shrinks that went through 0: moved by delta, pointing backwards
                    flipped = int(((signs < 0) & (torch.as_tensor(delta, device=h.device) > norms.to(h.device))).sum())
            elif self.mode == "exact":
                new, clipped = rotate_exact(h, delta, random_directions(h.shape, gen).to(h.device))
            else:
                key = tuple(h.shape)
                if key not in faithful_noise:
                    faithful_noise[key] = random_directions(h.shape, gen).to(h.device)
                target = float(self.delta * norms.mean()) if self.relative else float(self.delta)
                new, _ = rotate_faithful(h, target, faithful_noise[key])
                clipped = torch.zeros(h.shape[:-1], dtype=torch.bool, device=h.device)
            if stats is not None:
                moved = (new.float() - h.float()).norm(dim=-1)
                stats.append(
                    {
                        "layer": layer,
                        "n_tokens": int(norms.numel()),
                        "median_norm": float(norms.median()),
                        "mean_displacement": float(moved.mean()),
                        "n_clipped": int(clipped.sum()),
                        "n_flipped": flipped,
                    }
                )
            return new

        return site_hooks(model, self.target_site(), on_target, layers)
