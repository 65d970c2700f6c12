"""Patching tasks: clean/corrupted prompt sets with a per-prompt metric (higher = the clean behaviour).

A :class:`Task` holds aligned token ids (``clean`` and ``corrupted``, ``[n, pos]``, BOS first when
the model prepends one), the answer ids (``correct`` and ``wrong``, ``[n, k]``, padded with -1) and
the metric that scores the final position's logits:

* ``logit_diff``: mean logit of the valid correct ids minus mean logit of the valid wrong ids;
* ``prob_diff``: summed probability of the correct ids minus summed probability of the wrong ids;
* ``logprob``: log-probability of ``correct[:, 0]``.

Four builders make tasks offline, deterministically by seed, on any tokenizer they can:
:func:`ioi_task` (Wang et al. 2022), :func:`agreement_task` (BLiMP subject–verb agreement),
:func:`greater_than_task` (Hanna et al. 2023), :func:`induction_task` (repeated random tokens),
:func:`predecessor_task` (the token before a repeated one), :func:`lookback_task` (the same, answered after a
filler: Q-composition) and :func:`tracr_task` (a compiled tracr program's answer,
on the ``zoo/tracr-*`` models only).
Every prompt of a task has the same token length: a builder makes candidates, groups them by
length, keeps the largest group (ties: the shorter length) and takes the first ``n`` in a seeded
order. It returns fewer than ``n`` rows when fewer exist, and raises :class:`TaskError` when fewer
than 2 do. :func:`build_task` builds one by name for a model; :func:`clean_accuracy` checks that
the model does the task.

One module per task (:mod:`.ioi`, :mod:`.agreement`, :mod:`.greater_than`, :mod:`.induction`), the
task itself and the builders' helpers in :mod:`.base`, your own in :mod:`.custom`; :data:`TASKS` names
the builders.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import torch
from jaxtyping import Float, Int
from torch import Tensor

from .agreement import ONE_PREFIX, agreement_task
from .base import METRICS, Task, TaskError, logit_diff, logprob, prob_diff
from .custom import own_task, task_from_texts
from .greater_than import CENTURIES, YEAR_NOUNS, greater_than_task
from .induction import induction_task, lookback_task, predecessor_task
from .ioi import IOI_TEMPLATES, NAMES, OBJECTS, PLACES, ioi_task
from .tracr import tracr_task
from ...errors import InputError

__all__ = [
    "METRICS",
    "TaskError",
    "Task",
    "logit_diff",
    "prob_diff",
    "logprob",
    "IOI_TEMPLATES",
    "NAMES",
    "PLACES",
    "OBJECTS",
    "ONE_PREFIX",
    "YEAR_NOUNS",
    "CENTURIES",
    "ioi_task",
    "agreement_task",
    "greater_than_task",
    "induction_task",
    "predecessor_task",
    "lookback_task",
    "task_from_texts",
    "own_task",
    "TASKS",
    "build_task",
    "clean_accuracy",
    "tracr_task",
]


# ---------------------------------------------------------------------------------------------
# by name, and a model's accuracy

TASKS: dict[str, Callable[..., Task]] = {
    "ioi": ioi_task,
    "agreement": agreement_task,
    "greater_than": greater_than_task,
    "induction": induction_task,
    "predecessor": predecessor_task,
    "lookback": lookback_task,
    "tracr": tracr_task,
}


def build_task(name: str, model, *, n: int, seed: int = 0, **kwargs: Any) -> Task:
    """Task ``name`` of :data:`TASKS` on ``model``'s tokenizer: BOS first when the model prepends one,
    ``d_vocab`` checked; ``kwargs`` go to the builder (``paradigms=``, ``length=``)."""
    if name not in TASKS:
        raise InputError(f"unknown task {name!r}; known tasks: {list(TASKS)}")
    tok = model.tokenizer
    bos = tok.bos_token_id if model.cfg.default_prepend_bos else None
    d_vocab = int(model.cfg.d_vocab)
    if name in ("induction", "predecessor", "lookback") and "max_id" not in kwargs:
        kwargs["max_id"] = min(len(tok), d_vocab)
    task = TASKS[name](tok, n=n, seed=seed, bos=bos, **kwargs)
    return replace(task, d_vocab=d_vocab)


def _end_logits(model, tokens: Int[Tensor, "n pos"], batch_size: int) -> Float[Tensor, "n vocab"]:
    from ...models import input_device

    dev = input_device(model)
    out = []
    with torch.no_grad():
        for i in range(0, tokens.shape[0], batch_size):
            out.append(model(tokens[i : i + batch_size].to(dev))[:, -1].float().cpu())
    return torch.cat(out)


def clean_accuracy(model, task: Task, *, batch_size: int = 32) -> dict[str, float]:
    """How well ``model`` does ``task``: ``n``, ``accuracy`` and ``corrupted_accuracy`` (score > 0, or for
    ``logprob`` the top token is ``correct[:, 0]``), ``clean_metric`` and ``corrupted_metric`` (mean scores)."""
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    out: dict[str, float] = {"n": task.n}
    for label, tokens in (("clean", task.clean), ("corrupted", task.corrupted)):
        logits = _end_logits(model, tokens, batch_size)
        out["accuracy" if label == "clean" else "corrupted_accuracy"] = float(task.hits(logits).float().mean())
        out[f"{label}_metric"] = float(task.score(logits).mean())
    return out
