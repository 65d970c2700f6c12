"""The two runs a patch goes between: cached activations and per-prompt metrics.

``denoise`` patches the clean run's activations into the corrupted run (how much of the
behaviour one component restores); ``noise`` patches the corrupted run's into the clean run
(how much of it one component destroys). :func:`task_runs` caches what the chosen
components need at the chosen blocks, and the per-prompt metric of each run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from ..errors import InputError
from ..hooks.adapter import check_hook_names, resolve_layers
from ..models import Model, input_device, read_weights
from .components import Component, get_component
from .tasks import Task

__all__ = [
    "DIRECTIONS",
    "RunCache",
    "TaskRuns",
    "task_runs",
    "hook_names",
    "position_mask",
    "W_O",
    "score_rows",
    "check_separable_heads",
    "sweep_targets",
]

DIRECTIONS = ("denoise", "noise")


@dataclass
class RunCache:
    """One run over a task's prompts: its tokens, the cached activations (full hook names,
    ``[n, ...]``, on the model's devices), the per-prompt metric ``[n]`` (float32, CPU) and whether
    each prompt's answer is ahead (:meth:`Task.hits`)."""

    tokens: Int[Tensor, "n pos"]
    acts: dict[str, Tensor]
    metric: Float[Tensor, "n"]
    hits: Bool[Tensor, "n"]


@dataclass
class TaskRuns:
    """The clean and the corrupted run of a task (``readout``: per direction, whether reading out the
    last block's output gives the model's logits, found by the first exact sweep)."""

    task: Task
    clean: RunCache
    corrupted: RunCache
    readout: dict[str, bool] = field(default_factory=dict)

    def pair(self, direction: str) -> tuple[RunCache, RunCache]:
        """``(target, source)``: the run patched and the run patched from."""
        if direction not in DIRECTIONS:
            raise InputError(f"unknown direction {direction!r}; choose from {DIRECTIONS}")
        return (self.corrupted, self.clean) if direction == "denoise" else (self.clean, self.corrupted)

    def accuracy(self) -> dict[str, float]:
        """What :func:`~.tasks.clean_accuracy` reports, from these runs (no forward)."""
        return {
            "n": self.task.n,
            "accuracy": float(self.clean.hits.float().mean()),
            "clean_metric": float(self.clean.metric.mean()),
            "corrupted_accuracy": float(self.corrupted.hits.float().mean()),
            "corrupted_metric": float(self.corrupted.metric.mean()),
        }

    @property
    def gap(self) -> float:
        """Mean clean metric minus mean corrupted metric (the normaliser of every effect)."""
        return float(self.clean.metric.mean() - self.corrupted.metric.mean())


def hook_names(model: Model, components: Iterable[str | Component], layers: Iterable[int]) -> list[str]:
    """Every hook the components read or patch at ``layers``, and ``resid_pre`` of each (to resume from)."""
    names = []
    for layer in layers:
        names.append(f"blocks.{layer}.hook_resid_pre")
        for c in map(get_component, components):
            for suffix in (c.site.target, *(h for _, h in c.site.read_hooks(model))):
                names.append(f"blocks.{layer}.{suffix}")
    return list(dict.fromkeys(names))


def score_rows(task: Task, logits: Float[Tensor, "rows vocab"]) -> Float[Tensor, "rows"]:
    """The task metric of rows that repeat the task's prompts ``rows / n`` times, in order."""
    n = task.n
    if logits.shape[0] % n:
        raise InputError(f"{logits.shape[0]} rows are not a multiple of the task's {n} prompts")
    return torch.cat([task.score(chunk) for chunk in logits.split(n)])


def _cache(model: Model, task: Task, tokens: Tensor, names: Sequence[str], batch_size: int) -> RunCache:
    wanted = set(names)
    acts: dict[str, list[Tensor]] = {n: [] for n in names}
    metric, hits = [], []
    with torch.no_grad():
        for start in range(0, tokens.shape[0], batch_size):
            rows = slice(start, start + batch_size)
            logits, cache = model.run_with_cache(
                tokens[rows].to(input_device(model)), names_filter=lambda n: n in wanted
            )
            for n in names:
                acts[n].append(cache[n])  # on the model's devices (a sharded model's blocks on theirs)
            part = task.subset(rows)
            metric.append(part.score(logits[:, -1]).cpu())  # result rows: on the CPU
            hits.append(part.hits(logits[:, -1]))
    return RunCache(tokens, {n: torch.cat(v) for n, v in acts.items()}, torch.cat(metric).float(), torch.cat(hits))


def task_runs(
    model: Model,
    task: Task,
    components: Iterable[str | Component],
    layers: Iterable[int] | None = None,
    *,
    batch_size: int = 32,
    extra: Iterable[str] = (),
) -> TaskRuns:
    """Run the task's clean and corrupted prompts once, caching what ``components`` need at ``layers`` and the
    hooks ``extra`` (full names: what path patching reads, :func:`~.paths.path_hook_names`)."""
    chosen = resolve_layers(model.cfg, None if layers is None else list(layers))
    comps = [get_component(c) for c in components]
    names = list(dict.fromkeys([*hook_names(model, comps, chosen), *extra]))
    check_hook_names(model, names)
    if task.d_vocab is not None and task.d_vocab != model.cfg.d_vocab:
        raise InputError(
            f"task {task.name!r} was built for a vocabulary of {task.d_vocab} tokens; the model has {model.cfg.d_vocab}"
        )
    return TaskRuns(
        task, _cache(model, task, task.clean, names, batch_size), _cache(model, task, task.corrupted, names, batch_size)
    )


def position_mask(task: Task, positions: str) -> Float[Tensor, "n pos"] | None:
    """0/1 mask of the patched positions: ``None`` for ``all``, else one position per prompt."""
    if positions == "all":
        return None
    if positions not in task.positions:
        raise InputError(
            f"task {task.name!r} has no position {positions!r}; choose from {('all', *sorted(task.positions))}"
        )
    idx = torch.as_tensor(task.positions[positions]).long()
    mask = torch.zeros(task.clean.shape, dtype=torch.float32)
    mask[torch.arange(task.n), idx] = 1.0
    return mask


def W_O(model: Model, layer: int, copy: bool = True) -> Float[Tensor, "head d_head d_model"]:
    """Block ``layer``'s output projection per head, a detached copy (read from the offload folder where
    accelerate offloaded the block: its weights are on the meta device outside a forward), or a view of the model's
    own weight where ``copy`` is False and the block is in memory (to read, never to write)."""
    return _out_params(model, layer, copy)[0]


def _out_params(model: Model, layer: int, copy: bool = True) -> tuple[Tensor, Tensor | None]:
    return read_weights(model.blocks[layer].attn, "W_O", "b_O", copy=copy)


def sweep_targets(
    model: Model, runs: TaskRuns, components: Iterable[str | Component], layers: Iterable[int] | None
) -> tuple[list[Component], list[int]]:
    """The components and blocks a sweep patches, checked: blocks in range, cached in ``runs`` (a one-line
    error naming what is not), and heads whose writes add up to the attention output where a component
    splits a head's residual write."""
    comps = [get_component(c) for c in components]
    chosen = resolve_layers(model.cfg, None if layers is None else list(layers))
    missing = [
        f"{c.name} at block {layer}"
        for layer in chosen
        for c in comps
        if any(n not in runs.clean.acts for n in hook_names(model, [c], [layer]))
    ]
    if missing:
        raise InputError(
            f"the runs of task {runs.task.name!r} did not cache {', '.join(missing)}: make them with "
            f"task_runs(model, task, components, layers) naming every component and block patched"
        )
    if any(c.quantity == "write" for c in comps):
        check_separable_heads(model, runs, chosen)
    return comps, chosen


def check_separable_heads(model: Model, runs: TaskRuns, layers: Iterable[int]) -> None:
    """Raise ``ValueError`` unless each block's attention output is ``sum_h z^h W_O^h + b_O`` (then a
    head's residual write is its own; not so where a norm follows ``W_O``, as in Gemma 2 and 3)."""
    for layer in layers:
        z = runs.clean.acts.get(f"blocks.{layer}.attn.hook_z")
        out = runs.clean.acts.get(f"blocks.{layer}.hook_attn_out")
        if z is None or out is None:
            continue
        w, b = _out_params(model, layer)
        got = torch.einsum("bqhd,hdm->bqm", z.float(), w.float().to(z.device))
        if b is not None:
            got = got + b.float().to(got.device)
        err = float((got - out.float()).norm() / out.float().norm().clamp_min(1e-12))
        if err > 1e-3:
            raise InputError(
                f"block {layer}: the attention output is not the sum of the heads' writes z W_O "
                f"(relative error {err:.2g}; a norm after W_O?), so head_par / head_perp are not defined "
                f"for this model; patch head, self or nonself* instead"
            )
