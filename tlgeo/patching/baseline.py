"""The geometric baseline of ``head_par``: how much of a head's write lies along the residual by chance.

In a residual stream of width ``d_model`` any direction is nearly orthogonal to the residual: a
uniformly random direction puts an expected share ``1 / d_model`` of its energy along it (576 wide:
0.0017). A ``head_par`` effect near 0 is therefore only informative next to how much of the write
is parallel at all. On the clean run of a task, per block and head, over every prompt and position:

* ``par_share``: the mean of ``||P_r w||^2 / ||w||^2``, ``w = z^h W_O^h`` the head's residual write and
  ``r`` the residual it is written into: the very write and reference of ``head_par``
  (:func:`~.components.head_write_part` on the ``head_par`` site's reads);
* ``par_share_rotated``: the same share of the write turned by a random rotation: each token's write
  replaced by a direction drawn uniformly on the sphere (a normalised standard Gaussian), scaled to the
  write's norm. A Haar rotation ``Q w`` of a fixed ``w`` is exactly such a direction, so this is the
  per-token marginal of a Haar rotation, drawn independently per token and head (a ``d_model x
  d_model`` orthogonal matrix per token would cost ``d_model`` times more for the same mean);
* ``par_share_expected``: ``1 / d_model``, the expectation of the rotated share.

Float64 on the CPU whatever the model's dtype and device. A token whose write is zero has no share
and is left out (``tokens`` counts those kept; a head without any has shares 0, not NaN); a zero
reference has no parallel part (share 0, as in ``head_par``). The rotations are seeded by
``(seed, layer)`` alone, so a block's rows do not depend on the work units run with it.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from ..geometry.patch_parts import project_part
from ..models import Model
from .components import get_component, head_write_part
from .runs import W_O, TaskRuns

__all__ = ["par_shares", "par_baseline_rows", "COLUMNS"]

COLUMNS = ("layer", "head", "tokens", "d_model", "par_share", "par_share_rotated", "par_share_expected")
_ELEMENTS = 1 << 22  # float64 elements of the writes per chunk of prompts (bounds memory)


def par_shares(
    z: Float[Tensor, "rows q head d_head"],
    ref: Float[Tensor, "rows q d_model"],
    W_O: Float[Tensor, "head d_head d_model"],
    noise: Float[Tensor, "rows q head d_model"],
) -> tuple[Tensor, Tensor, Tensor]:
    """Per token and head, float64: the energy share of the write ``z^h W_O^h`` along ``ref``, the same
    share of a write of the same norm in the direction of ``noise`` (a standard Gaussian gives a uniformly
    random direction) and whether the write is non-zero (the shares are 0 where it is not)."""
    z, ref, W_O, noise = (t.detach().to("cpu", torch.float64) for t in (z, ref, W_O, noise))
    w = head_write_part(z, ref, W_O, "whole")
    par = head_write_part(z, ref, W_O, "par")
    energy = (w * w).sum(-1)
    kept = energy > 0
    safe = torch.where(kept, energy, torch.ones_like(energy))
    share = torch.where(kept, (par * par).sum(-1) / safe, torch.zeros_like(energy))
    g = (noise * noise).sum(-1)
    rotated = noise * (energy / torch.where(g > 0, g, torch.ones_like(g))).sqrt().unsqueeze(-1)  # norm ||w||
    rpar = project_part(rotated, ref.unsqueeze(-2), "par")
    rshare = torch.where(kept & (g > 0), (rpar * rpar).sum(-1) / safe, torch.zeros_like(energy))
    return share, rshare, kept


def par_baseline_rows(model: Model, runs: TaskRuns, layers: list[int], *, seed: int) -> list[dict]:
    """One row per block in ``layers`` and head (:data:`COLUMNS`) from the clean run's cached
    activations of the ``head_par`` site (the caller checks that the heads' writes are their own)."""
    reads = dict(get_component("head_par").site.read_hooks(model))
    acts = runs.clean.acts
    d_model = int(model.cfg.d_model)
    rows = []
    for layer in layers:
        z, ref = acts[f"blocks.{layer}.{reads['z']}"], acts[f"blocks.{layer}.{reads['ref']}"]
        w_o = W_O(model, layer)
        n, q, n_heads = z.shape[:3]
        gen = torch.Generator().manual_seed(seed * 1_000_003 + layer)
        step = max(1, _ELEMENTS // (q * n_heads * d_model))
        total = torch.zeros(3, n_heads, dtype=torch.float64)
        for start in range(0, n, step):
            part = slice(start, start + step)
            noise = torch.randn((z[part].shape[0], q, n_heads, d_model), generator=gen, dtype=torch.float64)
            share, rshare, kept = par_shares(z[part], ref[part], w_o, noise)
            total += torch.stack([share.sum((0, 1)), rshare.sum((0, 1)), kept.sum((0, 1)).double()])
        count = total[2].clamp_min(1)
        for h in range(n_heads):
            rows.append(
                dict(
                    layer=layer,
                    head=h,
                    tokens=int(total[2, h]),
                    d_model=d_model,
                    par_share=float(total[0, h] / count[h]),
                    par_share_rotated=float(total[1, h] / count[h]),
                    par_share_expected=1.0 / d_model,
                )
            )
    return rows
