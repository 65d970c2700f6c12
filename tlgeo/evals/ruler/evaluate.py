"""Greedy generation under forward hooks, and RULER evaluation over a (task, length) grid.

Generation is greedy with the bridge's own ``generate`` and its KV cache, with
the forward hooks active. With transformers 5.17 (installed here) the cached
and uncached greedy outputs are identical on SmolLM2, edited or not (value-space
edits see ``q < k`` queries during cached decoding and handle it; checked by
:func:`greedy_generate` in the tests); transformers 5.24 was reported to break
the bridge's cached ``generate``, so ``use_kv_cache=False`` is kept as a switch.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from ...errors import InputError
from ...models import input_device
from ...runner.identity import run_identity
from ...runner.results import ResultLog
from .prompts import _Tok, prompt_ids
from .scoring import METRICS
from .tasks import TASK_NAMES, TASKS, Sample, make_task

__all__ = ["greedy_generate", "generate_answers", "evaluate_ruler", "compare_ruler", "KEY"]

Hook = tuple[str | Callable, Callable]


def _stop_ids(tokenizer) -> list[int]:
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for i, t in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items():
        if getattr(t, "special", False):
            ids.add(int(i))
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return sorted(ids)


_UNEMBED_IN = "unembed.hook_in"


def _last_position(resid: Float[Tensor, "batch pos d_model"], hook) -> Float[Tensor, "batch 1 d_model"]:
    return resid[:, -1:]


def greedy_generate(
    model,
    tokens: Int[Tensor, "batch pos"],
    max_new_tokens: int,
    *,
    fwd_hooks: Iterable[Hook] = (),
    use_kv_cache: bool = True,
    stop_ids: Sequence[int] | None = None,
) -> Int[Tensor, "batch new"]:
    """Greedy continuation ``[batch, new]`` of equal-length prompts with ``fwd_hooks`` active.

    Uses the bridge's ``generate`` (KV cache on by default); sequences that
    emit a ``stop_ids`` token are padded with it until all stop. Only the last
    position is unembedded (a hook on ``unembed.hook_in``, after ``fwd_hooks``):
    the prefill's ``[batch, pos, d_vocab]`` logits, which ``generate`` would
    compute and drop but for one position, are never made.
    """
    if tokens.ndim != 2 or tokens.shape[1] == 0:
        raise InputError(f"tokens must be [batch, pos] with pos >= 1, got {tuple(tokens.shape)}")
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if tokens.shape[1] + max_new_tokens > model.cfg.n_ctx:
        raise InputError(
            f"prompt of {tokens.shape[1]} tokens + {max_new_tokens} new tokens exceeds the "
            f"model's context of {model.cfg.n_ctx} tokens"
        )
    kw = dict(stop_at_eos=False)
    if stop_ids:
        kw = dict(stop_at_eos=True, eos_token_id=list(stop_ids))
    device = input_device(model)
    hooks = list(fwd_hooks)
    if _UNEMBED_IN in model.hook_dict:
        hooks.append((_UNEMBED_IN, _last_position))
    with torch.inference_mode(), model.hooks(fwd_hooks=hooks):
        out = model.generate(
            tokens.to(device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            use_past_kv_cache=use_kv_cache,
            verbose=False,
            return_type="tokens",
            **kw,
        )
    return out[:, tokens.shape[1] :].cpu()


def _decode_answer(tokenizer, ids: Sequence[int], stop: set[int]) -> str:
    cut = list(ids)
    for j, t in enumerate(cut):
        if t in stop:
            cut = cut[:j]
            break
    return " ".join(tokenizer.decode(cut).split())  # RULER: newlines to spaces, strip


def generate_answers(
    model,
    samples: Sequence[Sample],
    *,
    fwd_hooks: Iterable[Hook] = (),
    max_new_tokens: int | None = None,
    batch_size: int = 4,
    use_kv_cache: bool = True,
    progress: bool = False,
) -> list[str]:
    """Greedy outputs for ``samples`` (prompts of equal token length batched together);
    ``progress``: a bar over the samples, batch by batch."""
    hooks = list(fwd_hooks)
    ids = [prompt_ids(model, s.prompt, s.template) for s in samples]
    stop = _stop_ids(model.tokenizer)
    preds: list[str | None] = [None] * len(samples)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, s in enumerate(samples):
        n_new = max_new_tokens if max_new_tokens is not None else s.max_new_tokens
        groups.setdefault((len(ids[i]), n_new), []).append(i)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(samples), desc="generate", unit="sample", leave=False)
    for (_, n_new), idx in groups.items():
        for b in range(0, len(idx), batch_size):
            chunk = idx[b : b + batch_size]
            toks = torch.tensor([ids[i] for i in chunk], dtype=torch.long)
            new = greedy_generate(model, toks, n_new, fwd_hooks=hooks, use_kv_cache=use_kv_cache, stop_ids=stop)
            for i, row in zip(chunk, new.tolist()):
                preds[i] = _decode_answer(model.tokenizer, row, set(stop))
            if bar is not None:
                bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return preds  # type: ignore[return-value]


KEY = ("label", "task", "length", "n", "haystack", "seed", "template")


def evaluate_ruler(
    model,
    tasks: Sequence[str] = TASK_NAMES,
    lengths: Sequence[int] = (1024, 2048, 4096),
    n_samples: int = 4,
    *,
    fwd_hooks: Iterable[Hook] = (),
    max_new_tokens: int | None = None,
    log_path: str | os.PathLike | None = None,
    label: str = "none",
    seed: int = 0,
    haystack: str = "corpora",
    batch_size: int = 4,
    use_kv_cache: bool = True,
    template: str = "base",
    progress: bool = False,
) -> pd.DataFrame:
    """RULER score (percent) of ``model`` per (task, length), greedy, with ``fwd_hooks`` active.

    Returns one row per (task, length): ``label, task, length, n, score,
    haystack, seed, template, n_tokens`` (mean prompt length), ``wall_s``, ``preds``.
    With ``log_path`` each (label, task, length) row is stored as soon as it is
    scored and skipped on a rerun (``label`` names the edit). ``max_new_tokens``
    overrides the per-task defaults; ``template``: see :func:`make_task`.
    """
    tasks, lengths = list(tasks), list(lengths)
    if not tasks or not lengths:
        raise InputError(f"empty grid: tasks={tasks}, lengths={lengths}")
    for t in tasks:
        if t not in TASKS:
            raise InputError(f"unknown RULER task {t!r}; known tasks: {list(TASKS)}")
    _Tok(model, template)  # an unknown template, or "chat" without a chat template, fails here
    n_ctx = model.cfg.n_ctx
    for L in lengths:
        extra = max_new_tokens if max_new_tokens is not None else max(TASKS[t].max_new_tokens for t in tasks)
        if L > n_ctx or L + extra > n_ctx:
            raise InputError(f"length {L} (+{extra} new tokens) exceeds the model's context of {n_ctx} tokens")
    hooks = list(fwd_hooks)
    log = ResultLog(log_path, KEY, identity=run_identity(model).row()) if log_path is not None else None
    rows = []
    grid = [(t, L) for t in tasks for L in lengths]
    if progress:
        from tqdm.auto import tqdm

        grid = tqdm(grid, desc=f"ruler {label}", unit="cell", leave=False)
    for task, length in grid:
        key = dict(label=label, task=task, length=length, n=n_samples, haystack=haystack, seed=seed, template=template)
        row = log.get(**key) if log is not None else None
        if row is None:
            t0 = time.perf_counter()
            samples = make_task(task, model, length, n_samples, seed=seed, haystack=haystack, template=template)
            preds = generate_answers(
                model,
                samples,
                fwd_hooks=hooks,
                max_new_tokens=max_new_tokens,
                batch_size=batch_size,
                use_kv_cache=use_kv_cache,
                progress=progress,
            )
            score = METRICS[samples[0].metric](preds, [s.answers for s in samples])
            row = {
                **key,
                "score": score,
                "n_tokens": float(np.mean([s.n_tokens for s in samples])),
                "wall_s": time.perf_counter() - t0,
                "preds": preds,
            }
            if log is not None:
                log.add(row)
        rows.append(row)
    return pd.DataFrame(rows)


def compare_ruler(model, edits: Sequence, **kwargs) -> pd.DataFrame:
    """:func:`evaluate_ruler` unedited (``label="none"``) and under each :class:`~tlgeo.hooks.edits.Edit`.

    Labels are ``"<site> s_par=<a> s_perp=<b> skip=<k>"``; ``kwargs`` go to
    :func:`evaluate_ruler` (one ``log_path`` serves all runs).
    """
    frames = [evaluate_ruler(model, label="none", **kwargs)]
    for e in edits:
        d = e.describe()
        label = f"{d['site']} s_par={d['s_par']} s_perp={d['s_perp']} skip={d['skip_first']}"
        if d["layers"] != "all" or d["heads"] != "all":
            label += f" layers={d['layers']} heads={d['heads']}"
        frames.append(evaluate_ruler(model, fwd_hooks=e.hooks(model), label=label, **kwargs))
    return pd.concat(frames, ignore_index=True)
