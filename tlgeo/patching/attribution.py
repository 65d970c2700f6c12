"""Attribution patching: every component's patch effect to first order, from one forward and backward.

The metric of the target run with a change ``d`` added at a hook is, to first order,
``m + <dm/dx, d>``. With ``d`` each component's change
(:meth:`~tlgeo.patching.components.Component.delta`, the same definition exact patching
adds), every (component, block, head) is estimated from the target run's gradients at the
patched hooks: the gradient with respect to a part is the gradient projected on that part's
subspace, so ``<g, P_r d> = <P_r g, d>``. One forward and one backward per batch of prompts.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import Tensor

from ..models import Model, input_device
from .components import Component
from .exact import Row
from .runs import W_O, TaskRuns, hook_names, position_mask, sweep_targets

__all__ = ["attribution_sweep", "target_gradients"]


def target_gradients(
    model: Model, runs: TaskRuns, names: list[str], grad_names: set[str], *, direction: str, rows: slice
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The target run's activations at ``names`` and the metric's gradients at ``grad_names``
    (for prompts ``rows``; the sum of per-prompt metrics, so row ``i``'s gradient is prompt ``i``'s)."""
    target, _ = runs.pair(direction)
    task = runs.task.subset(range(*rows.indices(runs.task.n)))
    acts: dict[str, Tensor] = {}

    def leaf(x: Tensor, hook) -> Tensor:  # the graph starts here: no parameter gradients are needed
        return x.detach().requires_grad_(True)

    def keeper(name: str):
        def keep(x: Tensor, hook) -> Tensor:  # by the name asked for (the bridge's hook.name may be another alias)
            acts[name] = x
            return x  # returned, so that the bridge uses this very tensor (hook_z is a reshaped view of o's input)

        return keep

    hooks = [("blocks.0.hook_resid_pre", leaf)] + [(n, keeper(n)) for n in names]
    with torch.enable_grad(), model.hooks(fwd_hooks=hooks):
        logits = model(target.tokens[rows].to(input_device(model)))
        metric = task.score(logits[:, -1]).sum()
    wanted = sorted(grad_names)
    grads = torch.autograd.grad(metric, [acts[n] for n in wanted], allow_unused=True)
    grads_by = {n: (torch.zeros_like(acts[n]) if g is None else g) for n, g in zip(wanted, grads)}
    return {n: a.detach() for n, a in acts.items()}, grads_by


def attribution_sweep(
    model: Model,
    runs: TaskRuns,
    components: Iterable[str | Component],
    *,
    layers: Iterable[int] | None = None,
    direction: str = "denoise",
    positions: str = "all",
    frame: str = "patched",
    batch_size: int = 32,
) -> list[Row]:
    """One row per (component, layer, head) with the first-order estimate of the patched
    run's per-prompt metric (``patched``: target metric + ``<gradient, change>``)."""
    comps, chosen = sweep_targets(model, runs, components, layers)
    target, source = runs.pair(direction)
    n, n_heads = runs.task.n, model.cfg.n_heads
    pos_all = position_mask(runs.task, positions)
    names = hook_names(model, comps, chosen)
    grad_names = {f"blocks.{l}.{c.site.target}" for l in chosen for c in comps}
    est: dict[tuple[str, int], list[Tensor]] = {}
    for start in range(0, n, batch_size):
        rows = slice(start, min(start + batch_size, n))
        acts, grads = target_gradients(model, runs, names, grad_names, direction=direction, rows=rows)
        pos = None if pos_all is None else pos_all[rows]
        for layer in chosen:
            for c in comps:
                roles = c.site.read_hooks(model)
                tname = f"blocks.{layer}.{c.site.target}"
                tgt = {"target": acts[tname], **{r: acts[f"blocks.{layer}.{h}"] for r, h in roles}}
                src = {
                    "target": source.acts[tname][rows],
                    **{r: source.acts[f"blocks.{layer}.{h}"][rows] for r, h in roles},
                }
                g = grads[tname]
                w = W_O(model, layer) if c.quantity == "write" else None
                if c.scope == "layer":
                    d = c.delta(tgt, src, heads=None, pos=pos, frame=frame)
                    e = (d * g.to(d)).flatten(1).sum(1)[:, None]
                else:  # every head's own change at once: [rows, q, heads, ...]
                    d = c.head_deltas(tgt, src, pos=pos, frame=frame, W_O=w)
                    g = g.to(d) if c.quantity != "write" else g.to(d).unsqueeze(-2)
                    e = (d * g).sum(-1).sum(1)
                est.setdefault((c.name, layer), []).append(e.float().cpu())
    out: list[Row] = []
    for layer in chosen:
        for c in comps:
            e = torch.cat(est[(c.name, layer)])  # [n, heads or 1]
            patched = target.metric[:, None] + e
            heads = [-1] if c.scope == "layer" else range(n_heads)
            out += [
                dict(component=c.name, layer=layer, head=h, patched=patched[:, i].tolist()) for i, h in enumerate(heads)
            ]
    return out
