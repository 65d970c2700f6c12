"""Exact activation patching of components, batched over heads and resumed at the patched block.

:func:`patch_hooks` is the hook adapter: TransformerLens ``(name, fn)`` pairs that add a
component's change (:meth:`~tlgeo.patching.components.Component.delta`) at one block, for
use with ``run_with_hooks``, ``model.hooks(...)`` or :func:`~tlgeo.hooks.resume.resume_forward`.

:func:`exact_sweep` patches every (component, block, head): the patched run enters block
``L`` from its cached ``resid_pre`` (blocks before ``L`` are not run), and one forward
patches every head of a block, each in its own copy of the prompts (``rows = heads x n``,
cut to ``max_rows``). Only the last position is read out.
"""

from __future__ import annotations

from typing import Iterable, Mapping

import torch
from torch import Tensor

from ..errors import InputError, OutOfRangeError, spans
from ..hooks.adapter import HookList, site_hooks
from ..hooks.resume import readout, resume_forward, resumed_last_block_output
from ..models import Model
from .components import FRAMES, Component, get_component
from .runs import W_O, RunCache, TaskRuns, position_mask, score_rows, sweep_targets

__all__ = ["patch_hooks", "exact_sweep", "patched_metric", "heads_per_forward"]

Row = dict


def patch_hooks(
    model: Model,
    components: Iterable[str | Component],
    layer: int,
    source: Mapping[str, Tensor],
    *,
    heads: Tensor | None = None,
    pos: Tensor | None = None,
    frame: str = "patched",
) -> HookList:
    """Hooks that patch ``components`` at block ``layer`` from ``source`` (full hook names →
    the source run's tensors, with the patched run's rows). ``heads``: ``[rows, n_heads]`` 0/1
    (``None``: all); ``pos``: ``[rows, q]`` 0/1 (``None``: all). Components patched together
    must share their hook: ``self``, ``nonself*`` together; ``head_par``, ``head_perp``; the
    ``mlp*`` ones."""
    if frame not in FRAMES:
        raise InputError(f"unknown frame {frame!r}; choose from {FRAMES}")
    comps = [get_component(c) for c in components]
    if not comps:
        raise InputError("no component to patch")
    by_target: dict[str, list[Component]] = {}
    for c in comps:
        by_target.setdefault(c.site.target, []).append(c)
    hooks: HookList = []
    for target, group in by_target.items():
        sites = {c.site.name for c in group}
        if len(sites) > 1:
            raise InputError(
                f"components {[c.name for c in group]} patch {target} in different ways; patch them in separate runs"
            )
        site = group[0].site
        if any(c.scope == "layer" for c in group) and heads is not None:
            raise InputError(f"{[c.name for c in group]}: heads apply only to head components")
        src = {
            "target": source[f"blocks.{layer}.{site.target}"],
            **{role: source[f"blocks.{layer}.{h}"] for role, h in site.read_hooks(model)},
        }
        w = W_O(model, layer) if any(c.quantity == "write" for c in group) else None

        def on_target(_layer: int, tensor: Tensor, reads, _group=group, _src=src, _w=w) -> Tensor:
            tgt = {"target": tensor, **reads}
            d = sum(c.delta(tgt, _src, heads=heads, pos=pos, frame=frame, W_O=_w) for c in _group)
            return (tensor.to(d.dtype) + d).to(tensor.dtype)

        hooks += site_hooks(model, site, on_target, layers=[layer])
    return hooks


def _rows_of(acts: Mapping[str, Tensor], names: Iterable[str], reps: int) -> dict[str, Tensor]:
    return {n: acts[n].repeat(reps, *([1] * (acts[n].ndim - 1))) for n in names}


def patched_metric(
    model: Model,
    runs: TaskRuns,
    component: str | Component,
    layer: int,
    heads: list[int] | None,
    *,
    direction: str = "denoise",
    positions: str = "all",
    frame: str = "patched",
    use_readout: bool = True,
) -> Tensor:
    """Per-prompt metric ``[len(heads), n]`` (``[1, n]`` for a layer component) of the target run
    with ``component`` of each listed head patched, one copy of the prompts per head."""
    c = get_component(component)
    if heads is not None:
        bad = [h for h in heads if not isinstance(h, int) or not 0 <= h < model.cfg.n_heads]
        if bad:
            raise OutOfRangeError(
                f"head(s) {spans(bad)} out of range: the model has {model.cfg.n_heads} heads "
                f"(0..{model.cfg.n_heads - 1})"
            )
        if c.scope == "layer":
            raise InputError(f"component {c.name!r} is one per block: give heads=None")
    target, source = runs.pair(direction)
    n = runs.task.n
    reps = 1 if heads is None else len(heads)
    pos = position_mask(runs.task, positions)
    names = [f"blocks.{layer}.{c.site.target}", *(f"blocks.{layer}.{h}" for _, h in c.site.read_hooks(model))]
    src = _rows_of(source.acts, names, reps)
    mask = None
    if heads is not None:
        eye = torch.eye(model.cfg.n_heads)[heads]  # [reps, n_heads]
        mask = eye.repeat_interleave(n, 0)
    hooks = patch_hooks(
        model, [c], layer, src, heads=mask, pos=None if pos is None else pos.repeat(reps, 1), frame=frame
    )
    resid = target.acts[f"blocks.{layer}.hook_resid_pre"]
    resid = resid.repeat(reps, 1, 1)
    with torch.no_grad():
        logits = _end_logits(model, resid, layer, hooks, use_readout)
    return score_rows(runs.task, logits).float().cpu().reshape(reps, n)


def _end_logits(model: Model, resid: Tensor, layer: int, hooks: HookList, use_readout: bool) -> Tensor:
    """The last position's logits of the forward resumed at ``layer``; with ``use_readout`` the
    forward stops after the last block and only the last position is read out."""
    if not use_readout:
        return resume_forward(model, resid, layer, hooks)[:, -1]
    return readout(model, resumed_last_block_output(model, resid, layer, hooks)[:, -1])


def _readout_ok(model: Model, run: RunCache, layer: int) -> bool:
    """Whether reading out the last block's output gives the model's logits (no final soft-cap etc.)."""
    resid = run.acts[f"blocks.{layer}.hook_resid_pre"][:2]
    with torch.no_grad():
        read = _end_logits(model, resid, layer, [], True)
        full = _end_logits(model, resid, layer, [], False)
    return bool(torch.allclose(read.float(), full.float(), rtol=1e-3, atol=1e-3))


def heads_per_forward(n_heads: int, n_prompts: int, max_rows: int) -> int:
    """Heads patched in one forward of :func:`exact_sweep` (each in its own copy of the ``n_prompts``
    prompts: ``rows = heads x n_prompts``, cut to ``max_rows``, at least one head)."""
    return min(n_heads, max(1, max_rows // n_prompts))


def exact_sweep(
    model: Model,
    runs: TaskRuns,
    components: Iterable[str | Component],
    *,
    layers: Iterable[int] | None = None,
    direction: str = "denoise",
    positions: str = "all",
    frame: str = "patched",
    max_rows: int = 256,
) -> list[Row]:
    """Patch each component at each block and head; one row per (component, layer, head) with the
    per-prompt metric of the patched run (``patched``, a list of ``n`` floats). ``head`` is -1 for
    layer components."""
    comps, chosen = sweep_targets(model, runs, components, layers)
    if max_rows < 1:
        raise InputError(f"max_rows must be >= 1, got {max_rows}")
    target, _ = runs.pair(direction)
    if direction not in runs.readout:  # checked once per runs and direction (two small forwards)
        runs.readout[direction] = _readout_ok(model, target, chosen[0])
    use_readout = runs.readout[direction]
    per = heads_per_forward(model.cfg.n_heads, runs.task.n, max_rows)
    out: list[Row] = []
    for layer in chosen:
        for c in comps:
            rows: list[Row] = []
            if c.scope == "layer":
                m = patched_metric(
                    model,
                    runs,
                    c,
                    layer,
                    None,
                    direction=direction,
                    positions=positions,
                    frame=frame,
                    use_readout=use_readout,
                )
                rows.append(dict(component=c.name, layer=layer, head=-1, patched=m[0].tolist()))
            else:
                heads = list(range(model.cfg.n_heads))
                for start in range(0, len(heads), per):
                    chunk = heads[start : start + per]
                    m = patched_metric(
                        model,
                        runs,
                        c,
                        layer,
                        chunk,
                        direction=direction,
                        positions=positions,
                        frame=frame,
                        use_readout=use_readout,
                    )
                    rows += [
                        dict(component=c.name, layer=layer, head=h, patched=m[i].tolist()) for i, h in enumerate(chunk)
                    ]
            out += rows
    return out
