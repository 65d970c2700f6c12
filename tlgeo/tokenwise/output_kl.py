"""What a tokenwise approximation does to the output: patch one token's state, measure the KL.

For pool tokens ``i`` (window ``w``, position ``p``) and, per layer map ``l``, a
replacement ``T(h_l)[i]``: the run on window ``w`` with ``h_{l+1}[p]`` replaced
(``blocks.l.hook_resid_post``, one patched token per row) gives
``KL(p_clean || p_patched)`` of the next-token distribution at ``p`` and summed
over ``p`` and the positions after it (the ones before cannot change). One
clean forward per batch of rows caches ``blocks.l.hook_resid_pre`` of every
layer and the clean log-probabilities; each patched run resumes at block ``l``
(:func:`tlgeo.hooks.resume.resume_forward`), so it costs blocks ``l..`` only.

A plain Hugging Face model (e.g. Mamba) is patched with a forward hook on its
layer ``l`` (:func:`tlgeo.tokenwise.pool.layer_list`) in whole forwards.
"""

from __future__ import annotations

from typing import Hashable, Mapping

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from ..errors import InputError
from ..hooks.resume import readout, readout_matches, resume_forward, resumed_last_block_output
from ..models import Model
from ..models.bridge import is_bridge
from .pool import StatePool, layer_list, n_layer_maps

__all__ = ["patch_kl", "patch_kl_sets"]


LOGIT_BUDGET = 1 << 24  # float32 logits (64 MiB) per patched forward


def patch_kl(
    model: Model,
    pool: StatePool,
    indices: np.ndarray,
    replacements: Mapping[int, Float[Tensor, "n d"]],
    *,
    batch_size: int = 16,
    progress: bool = False,
) -> pd.DataFrame:
    """KL of patching each pool token ``indices[j]`` to ``replacements[l][j]`` at every layer ``l`` given.

    Columns: ``index, layer, window, position, kl`` (at the patched position, nats) and
    ``kl_following`` (summed over it and the later positions)."""
    return patch_kl_sets(model, pool, indices, {None: replacements}, batch_size=batch_size, progress=progress).drop(
        columns="set"
    )


def _check_sets(model: Model, indices: np.ndarray, sets: Mapping[Hashable, Mapping[int, Tensor]]) -> int:
    """The model's layer maps; raise on a layer out of range or a replacement not ``[len(indices), d_model]``."""
    n_layers = n_layer_maps(model)
    d_model = model.cfg.d_model if is_bridge(model) else model.config.hidden_size
    for name, replacements in sets.items():
        for l, rep in replacements.items():
            if not 0 <= l < n_layers:
                raise InputError(f"layer {l} out of range: the model has blocks 0..{n_layers - 1}")
            if rep.shape != (len(indices), d_model):
                where = f"replacements[{l}]" if name is None else f"replacements[{name!r}][{l}]"
                raise InputError(f"{where} must be [{len(indices)}, {d_model}], got {tuple(rep.shape)}")
    return n_layers


def _rows_per_forward(model: Model, batch_size: int, seq: int) -> int:
    """``batch_size`` cut to ~64 MiB of ``[seq, vocab]`` float32 logits per forward."""
    # each row holds [positions, vocab] float32 logits several times over (clean, patched, their
    # log-softmax), so a batch is cut to ~64 MiB of logits (SmolLM2, 64 positions: 5 rows, not 16)
    vocab = model.cfg.d_vocab if is_bridge(model) else model.config.vocab_size
    return max(1, min(batch_size, LOGIT_BUDGET // max(1, seq * vocab)))


def _clean_log_probs(model: Model, toks: Tensor, names: list[str], final: str, sel: Tensor) -> tuple:
    """``(log p_clean, cache, fast)`` of a clean forward on ``toks [B, T]``: with ``fast`` (a bridge whose readout
    matches its logits) only the positions ``sel`` are kept, ``[n_sel, vocab]``, else all, ``[B, T, vocab]``."""
    if is_bridge(model):
        logits, cache = model.run_with_cache(toks, names_filter=lambda n: n in names or n == final)
        fast = readout_matches(model, cache[final], logits)
    else:
        logits, cache, fast = model(input_ids=toks.to(next(model.parameters()).device)).logits, None, False
    sel = sel.to(logits.device)
    clean = torch.log_softmax(logits[sel].float(), -1) if fast else torch.log_softmax(logits.float(), -1)
    return clean, cache, fast  # the [B, T, vocab] logits are freed here: what is needed of them is in clean


def _patched_kls(model: Model, toks: Tensor, cache, fast: bool, clean: Tensor, p_clean: Tensor, patch: tuple):
    """Per row, the KL at its patched position and summed over it and the later ones, of ``patch``:
    ``(layer, rows, positions, after [B, T], replacements)``."""
    l, b, pos, after, rep = patch
    if fast:  # only the positions that can change go through the unembedding
        h = _patched_final(model, cache, l, b, pos, rep)
        kl = _kl(p_clean, clean, readout(model, h[after.to(clean.device)])).clamp_min(0).cpu()
        per_row = torch.split(kl, after.sum(1).tolist())  # per row: the patched position and the ones after it
        return [float(r[0]) for r in per_row], [float(r.sum()) for r in per_row]
    patched = torch.log_softmax(_patched_logits(model, toks, cache, l, b, pos, rep).float(), -1)
    kl = (p_clean * (clean - patched)).sum(-1).clamp_min(0).cpu()  # [B, T]
    return [float(kl[j, pos[j]]) for j in range(len(b))], [float(kl[j][after[j]].sum()) for j in range(len(b))]


def patch_kl_sets(
    model: Model,
    pool: StatePool,
    indices: np.ndarray,
    sets: Mapping[Hashable, Mapping[int, Float[Tensor, "n d"]]],
    *,
    batch_size: int = 16,
    progress: bool = False,
) -> pd.DataFrame:
    """:func:`patch_kl` of several sets of replacements (e.g. one per approximation class) at once: each
    batch's clean forward and clean log-probabilities are computed once and shared by every set.

    Columns: ``set`` (the key of ``sets``) and :func:`patch_kl`'s; the rows of one set in the order
    :func:`patch_kl` gives them."""
    indices = np.asarray(indices)
    n_layers = _check_sets(model, indices, sets)
    windows = pool.windows
    batch_size = _rows_per_forward(model, batch_size, windows.shape[1])
    patches = [(name, l, reps[l]) for name, reps in sets.items() for l in sorted(reps)]  # per batch, in this order
    names = sorted({f"blocks.{l}.hook_resid_pre" for _, l, _ in patches})
    rows: dict[Hashable, list[dict]] = {name: [] for name in sets}
    starts = range(0, len(indices), batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="patching", leave=False)
    final = f"blocks.{n_layers - 1}.hook_resid_post"
    for s in starts:
        idx = indices[s : s + batch_size]
        win, pos = pool.window[idx], torch.as_tensor(pool.position[idx])
        toks = windows[torch.as_tensor(win)]
        b = torch.arange(len(idx))
        after = torch.arange(toks.shape[1])[None, :] >= pos[:, None]  # positions that can change
        with torch.inference_mode():
            clean, cache, fast = _clean_log_probs(model, toks, names, final, after)
            p_clean = clean.exp()  # once per batch, shared by every layer
            for name, l, rep in patches:
                patch = (l, b, pos, after, rep[s : s + batch_size])
                firsts, sums = _patched_kls(model, toks, cache, fast, clean, p_clean, patch)
                rows[name] += [
                    {
                        "set": name,
                        "index": int(idx[j]),
                        "layer": l,
                        "window": int(win[j]),
                        "position": int(pos[j]),
                        "kl": firsts[j],
                        "kl_following": sums[j],
                    }
                    for j in range(len(idx))
                ]
            del cache
    cols = ["set", "index", "layer", "window", "position", "kl", "kl_following"]
    return pd.DataFrame([r for name in sets for r in rows[name]], columns=cols)


def _kl(p_clean: Tensor, clean: Tensor, logits: Tensor, rows: int = 64) -> Tensor:
    """``[n]``: ``KL(p_clean || softmax(logits))`` of each of ``n`` positions (``clean``: ``log p_clean``), some
    ``rows`` at a time: the temporaries are a few ``[rows, vocab]`` arrays, not ``[n, vocab]`` ones."""
    return torch.cat(
        [
            (p_clean[i : i + rows] * (clean[i : i + rows] - torch.log_softmax(logits[i : i + rows].float(), -1))).sum(
                -1
            )
            for i in range(0, len(logits), rows)
        ]
    )


def _patched_final(model, cache, layer: int, rows: torch.Tensor, pos: torch.Tensor, rep: torch.Tensor) -> torch.Tensor:
    """The last block's output ``[B, T, d]`` with layer map ``layer``'s output at ``(rows[j], pos[j])``
    set to ``rep[j]``, resumed at block ``layer``; the unembedding is never run."""

    def put(h, hook):
        h = h.clone()
        h[rows, pos] = rep.to(h.device, h.dtype)
        return h

    return resumed_last_block_output(
        model, cache[f"blocks.{layer}.hook_resid_pre"], layer, [(f"blocks.{layer}.hook_resid_post", put)]
    )


def _patched_logits(
    model, toks: torch.Tensor, cache, layer: int, rows: torch.Tensor, pos: torch.Tensor, rep: torch.Tensor
) -> torch.Tensor:
    """Logits with the output of layer map ``layer`` at ``(rows[j], pos[j])`` set to ``rep[j]``."""

    def put(h: torch.Tensor) -> torch.Tensor:
        h = h.clone()
        h[rows, pos] = rep.to(h.device, h.dtype)
        return h

    if cache is not None:  # a bridge: resumed at block ``layer`` from the cached residual
        resid = cache[f"blocks.{layer}.hook_resid_pre"]
        return resume_forward(model, resid, layer, [(f"blocks.{layer}.hook_resid_post", lambda h, hook: put(h))])

    def hook(_, args, output):
        if isinstance(output, (tuple, list)):
            return (put(output[0]), *output[1:])
        return put(output)

    handle = layer_list(model)[layer].register_forward_hook(hook)
    try:
        return model(input_ids=toks.to(next(model.parameters()).device)).logits
    finally:
        handle.remove()
