"""Greedy continuations, batched with the KV cache, with or without a subspace edit, and how they diverge.

* :func:`greedy_continuations`: ``max_new_tokens`` greedy tokens of every prompt, batches
  left-padded (so the last position is every prompt's last token), the bridge's ``generate``
  with its KV cache; ``edit(rows, prompt_len)`` returns the :class:`~tlgeo.hooks.subspace.SubspaceEdit`
  of a batch, applied at the last position of every forward (persistent: the edited past
  stays in the cache). ``use_cache=False`` runs the same edit in a loop that recomputes the
  whole sequence, the edit at every position from the prompt's last token on (the check).
* :func:`greedy_continuations_each`: the same for several edits at once, each batch's rows once per
  edit in one generation (small batches: a step costs about a read of the weights).
* :func:`divergence_step`: the first generated position where two continuations differ.
* :func:`teacher_forced_kl`: ``KL(p_clean || p_edited)`` at each step along the unedited
  continuation, the edit at every position from the prompt's last token on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..hooks.resume import last_block_output, readout, readout_ok
from ..hooks.subspace import ComplementEdit, SubspaceEdit
from ..models import Model

__all__ = [
    "left_pad",
    "greedy_continuations",
    "greedy_continuations_each",
    "divergence_step",
    "teacher_forced_kl",
    "KL_CACHE_BYTES",
]

KL_CACHE_BYTES = 2 * 2**30  # the clean teacher-forced log-probabilities kept for the next condition up to this

EditFn = Callable[[np.ndarray, int], SubspaceEdit | ComplementEdit | None]


def left_pad(model: Model, prompts: Sequence[Int[Tensor, "pos"]]) -> tuple[Int[Tensor, "b T"], Int[Tensor, "b T"]]:
    """``(tokens, attention_mask)`` ``[b, T]``, left-padded."""
    pad = model.tokenizer.pad_token_id if getattr(model.tokenizer, "pad_token_id", None) is not None else 0
    t = max(len(p) for p in prompts)
    toks = torch.full((len(prompts), t), pad, dtype=torch.long)
    mask = torch.zeros(len(prompts), t, dtype=torch.long)
    for j, p in enumerate(prompts):
        toks[j, t - len(p) :] = p
        mask[j, t - len(p) :] = 1
    return toks, mask


def greedy_continuations(
    model: Model,
    prompts: Sequence[Int[Tensor, "pos"]],
    max_new_tokens: int = 64,
    *,
    batch_size: int = 16,
    edit: EditFn | None = None,
    use_cache: bool = True,
) -> Int[Tensor, "n new_tokens"]:
    """``[n, max_new_tokens]`` greedy continuation tokens (no stop at EOS)."""
    _check_generation(prompts, max_new_tokens)
    out = []
    for s in range(0, len(prompts), batch_size):
        rows = np.arange(s, min(s + batch_size, len(prompts)))
        toks, mask = left_pad(model, [prompts[i] for i in rows])
        e = edit(rows, toks.shape[1]) if edit is not None else None
        if e is not None and not use_cache:
            e = replace(e, positions="from", start=toks.shape[1] - 1)
        out.append(_generate(model, toks, mask, e.hooks(model) if e is not None else [], max_new_tokens, use_cache))
    return torch.cat(out)


def greedy_continuations_each(
    model: Model,
    prompts: Sequence[Int[Tensor, "pos"]],
    edits: Sequence[EditFn | None],
    max_new_tokens: int = 64,
    *,
    batch_size: int = 16,
) -> list[Int[Tensor, "n new_tokens"]]:
    """:func:`greedy_continuations` of every edit of ``edits`` (``None``: unedited), one ``[n, max_new_tokens]``
    each. A batch of prompts is generated once for all of them, its rows once per edit
    (:meth:`~tlgeo.hooks.subspace.SubspaceEdit.stack`): a step of a small batch costs about a read of the
    weights, so the edits share it (the batches hold ``len(edits) x batch_size`` rows). Each prompt is padded
    as in :func:`greedy_continuations`, so the tokens are the same, up to the order of a few float sums (a
    near-tie may break the other way). Edits that do not stack (not rotations) are generated one by one."""
    _check_generation(prompts, max_new_tokens)
    out: list[list[Tensor]] = [[] for _ in edits]
    for s in range(0, len(prompts), batch_size):
        rows = np.arange(s, min(s + batch_size, len(prompts)))
        toks, mask = left_pad(model, [prompts[i] for i in rows])
        got = [fn(rows, toks.shape[1]) if fn is not None else None for fn in edits]
        try:
            stacked = SubspaceEdit.stack(got, len(rows)) if any(e is not None for e in got) else None
        except ValueError:  # not all rotations: one generation per edit
            for i, e in enumerate(got):
                out[i].append(_generate(model, toks, mask, e.hooks(model) if e is not None else [], max_new_tokens))
            continue
        k = len(edits) if stacked is not None else 1  # no edit at all: one unedited generation serves every slot
        gen = _generate(
            model,
            toks.repeat(k, 1),
            mask.repeat(k, 1),
            stacked.hooks(model) if stacked is not None else [],
            max_new_tokens,
        )
        for i in range(len(edits)):
            out[i].append(gen[(i % k) * len(rows) : (i % k + 1) * len(rows)])
    return [torch.cat(o) for o in out]


def _check_generation(prompts: Sequence, max_new_tokens: int) -> None:
    if not prompts:
        raise InputError("an empty prompt set")
    if max_new_tokens < 1:
        raise InputError(f"max_new_tokens must be positive, got {max_new_tokens}")


def _generate(
    model: Model, toks: Tensor, mask: Tensor, hooks, max_new_tokens: int, use_cache: bool = True
) -> Int[Tensor, "b new_tokens"]:
    """The ``max_new_tokens`` greedy tokens after the left-padded ``toks`` (on the host), ``hooks`` applied: the
    bridge's ``generate`` with its KV cache, or (``use_cache=False``) a loop that recomputes the whole sequence."""
    device = next(model.parameters()).device
    with torch.inference_mode(), model.hooks(fwd_hooks=list(hooks)):
        if use_cache:
            return model.generate(
                toks.to(device),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                stop_at_eos=False,
                use_past_kv_cache=True,
                attention_mask=mask.to(device),
                return_type="tokens",
                verbose=False,
            )[:, toks.shape[1] :].cpu()
        seq, m = toks.to(device), mask.to(device)
        for _ in range(max_new_tokens):
            nxt = model(seq, attention_mask=m)[:, -1].argmax(-1, keepdim=True)
            seq, m = torch.cat([seq, nxt], 1), torch.cat([m, torch.ones_like(nxt)], 1)
        return seq[:, toks.shape[1] :].cpu()


def divergence_step(base: Int[Tensor, "steps"], edited: Int[Tensor, "steps2"]) -> int | None:
    """The first position where two token sequences differ (the shorter length when one is a
    prefix of the other, ``None`` when they are equal)."""
    n = min(len(base), len(edited))
    diff = (base[:n] != edited[:n]).nonzero()
    if len(diff):
        return int(diff[0])
    return None if len(base) == len(edited) else n


def _step_logprobs(model: Model, seq: Tensor, mask: Tensor, t: int, steps: int, hooks=()) -> Tensor:
    """``[b, steps, vocab]`` float32 log-probabilities of the ``steps`` tokens after the prompt of ``t``
    tokens, with ``hooks``; only those positions go through the unembedding where that gives the logits."""
    if readout_ok(model, seq):
        return torch.log_softmax(
            readout(model, last_block_output(model, seq, hooks, attention_mask=mask)[:, t - 1 : t - 1 + steps]).float(),
            -1,
        )
    with model.hooks(fwd_hooks=list(hooks)):
        return torch.log_softmax(model(seq, attention_mask=mask)[:, t - 1 : t - 1 + steps].float(), -1)


def teacher_forced_kl(
    model: Model,
    prompts: Sequence[Int[Tensor, "pos"]],
    continuations: Int[Tensor, "n steps"],
    edit: EditFn,
    *,
    batch_size: int = 16,
    clean_cache: dict | None = None,
) -> Float[Tensor, "n steps"]:
    """``[n, steps]``: ``KL(p_clean || p_edited)`` (nats) of each generated token's distribution,
    both given the unedited continuation so far. ``clean_cache``: a dict that keeps the clean
    log-probabilities per batch for the next call with the same prompts and continuations."""
    device = next(model.parameters()).device
    out = []
    steps = continuations.shape[1]
    for s in range(0, len(prompts), batch_size):
        rows = np.arange(s, min(s + batch_size, len(prompts)))
        toks, mask = left_pad(model, [prompts[i] for i in rows])
        t = toks.shape[1]
        seq = torch.cat([toks, continuations[rows]], 1).to(device)
        m = torch.cat([mask, torch.ones(len(rows), steps, dtype=torch.long)], 1).to(device)
        e = edit(rows, t)
        with torch.inference_mode():
            clean = clean_cache.get(s) if clean_cache is not None else None
            if clean is None:
                clean = _step_logprobs(model, seq, m, t, steps)
                if clean_cache is not None:
                    clean_cache[s] = clean
            e = replace(e, positions="from", start=t - 1)
            edited = _step_logprobs(model, seq, m, t, steps, e.hooks(model))
        out.append(_kl_rows(clean, edited).cpu())
    return torch.cat(out)


def _kl_rows(clean: Tensor, edited: Tensor) -> Tensor:
    """``KL(p_clean || p_edited)`` over the last axis of two ``[b, steps, vocab]`` log-probabilities, clamped
    at 0, a row at a time: the temporaries are one row's (~6 MB at SmolLM2's vocabulary), not the batch's
    three (~300 MB at 16 rows of 32 steps), and the numbers are the same."""
    return torch.stack([(c.exp() * (c - e)).sum(-1) for c, e in zip(clean, edited)]).clamp_min(0)
