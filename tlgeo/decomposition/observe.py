"""Observation: how parallel is each update, per layer and token (the paper's Figure 1).

Statistics are computed inside hooks while the forward runs (one read hook per
reference and one observer per site and block, chosen by name), so no
activation is cached: memory stays at one forward's worth whatever the corpus.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import pandas as pd
import torch
from jaxtyping import Int
from torch import Tensor

from ..errors import InputError
from ..geometry.parallel import compute_dtype, cosine, norm_ratio, parallel_ratio, split_parallel
from ..hooks.adapter import HookList, site_hooks
from ..evals.perplexity import corpus_batches
from ..hooks.sites import DECOMPOSITION_SITES, get_site
from ..models import Model, input_device

__all__ = ["check_tokens", "corpus_batches", "parallel_profile", "summarize_profile"]

STATS = ("alpha", "parallel_ratio", "norm_ratio", "cosine")


def check_tokens(model: Model, tokens, min_len: int = 1) -> Tensor:
    """Return ``tokens`` if it is a non-empty ``[batch, pos]`` integer tensor that fits the
    model's context (at least ``min_len`` positions), else raise a ``ValueError`` saying why."""
    if isinstance(tokens, str):
        raise TypeError("pass token ids; cut text with tlgeo.evals.perplexity.corpus_batches(model, text, seq_len)")
    if not isinstance(tokens, Tensor) or tokens.ndim != 2 or tokens.numel() == 0:
        shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
        raise InputError(f"tokens must be a non-empty [batch, pos] tensor of ids, got {shape}")
    if tokens.dtype.is_floating_point:
        raise InputError(f"tokens must be integer ids, got dtype {tokens.dtype}")
    if tokens.shape[1] > model.cfg.n_ctx:
        raise InputError(f"sequence length {tokens.shape[1]} exceeds the model's n_ctx={model.cfg.n_ctx}")
    if tokens.shape[1] < min_len:
        raise InputError(f"sequences of at least {min_len} tokens are needed, got {tokens.shape[1]}")
    return tokens


def _stats(y: Tensor, ref: Tensor) -> dict[str, Tensor]:
    dt = compute_dtype(y, ref)
    y, ref = y.to(dt), ref.to(dt)
    return {
        "alpha": split_parallel(y, ref).alpha,
        "parallel_ratio": parallel_ratio(y, ref),
        "norm_ratio": norm_ratio(y, ref),
        "cosine": cosine(y, ref),
    }


def _observer_hooks(model, sites: Sequence[str], layers, records: list) -> HookList:
    hooks: HookList = []
    for name in sites:
        site = get_site(name)

        def observe(layer: int, x: Tensor, reads: Mapping[str, Tensor], _site=site) -> None:
            y, ref = _site.decompose(x, reads)
            stats = {k: v.reshape(x.shape[:-1]).float().cpu() for k, v in _stats(y, ref).items()}
            records.append((_site.name, layer, stats))

        hooks += site_hooks(model, site, observe, layers)
    return hooks


def parallel_profile(
    model: Model,
    tokens: Int[Tensor, "batch pos"] | str,
    *,
    sites: Iterable[str] = DECOMPOSITION_SITES,
    layers: Iterable[int] | None = None,
    batch_size: int = 8,
    seq_len: int = 256,
    max_tokens: int | None = None,
    fwd_hooks: HookList = (),
    progress: bool = False,
) -> pd.DataFrame:
    """Per-token parallel statistics of every site and block, as a tidy DataFrame.

    ``tokens``: ``[batch, pos]`` ids, or a text cut by :func:`corpus_batches`.
    Columns: ``site, layer, head`` (-1 for residual sites), ``seq, pos`` (window
    and position), ``alpha``, ``parallel_ratio`` (``|alpha| ||r|| / ||y_perp||``),
    ``norm_ratio`` (``||y|| / ||r||``), ``cosine``. ``fwd_hooks`` (e.g. an edit)
    stay active, so edited models can be profiled too.
    """
    sites = [get_site(s).name for s in sites]
    bad = [s for s in sites if not get_site(s).is_decomposition]
    if bad:
        raise InputError(f"site(s) {bad} edit the pattern and have no decomposition to profile")
    if isinstance(tokens, str):
        tokens = corpus_batches(model, tokens, seq_len, max_tokens)
    check_tokens(model, tokens)

    records: list = []
    hooks = list(fwd_hooks) + _observer_hooks(model, sites, layers, records)  # observe after edits
    frames = []
    starts = range(0, tokens.shape[0], batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="profile", unit="batch")
    device = input_device(model)
    with torch.inference_mode(), model.hooks(fwd_hooks=hooks):
        for start in starts:
            batch = tokens[start : start + batch_size].to(device)
            records.clear()
            model(batch, return_type=None)
            frames += [_frame(site, layer, stats, start) for site, layer, stats in records]
    return pd.concat(frames, ignore_index=True)


def _frame(site: str, layer: int, stats: dict[str, Tensor], seq_offset: int) -> pd.DataFrame:
    a = stats["alpha"]  # [batch, pos] or [batch, pos, head]
    b, p = a.shape[:2]
    h = a.shape[2] if a.ndim == 3 else 1
    seq = torch.arange(b).view(b, 1, 1).expand(b, p, h) + seq_offset
    pos = torch.arange(p).view(1, p, 1).expand(b, p, h)
    head = torch.arange(h).view(1, 1, h).expand(b, p, h) if a.ndim == 3 else torch.full((b, p, 1), -1)
    cols = {
        "site": site,
        "layer": layer,
        "head": head.reshape(-1).numpy(),
        "seq": seq.reshape(-1).numpy(),
        "pos": pos.reshape(-1).numpy(),
    }
    cols.update({k: v.reshape(-1).numpy() for k, v in stats.items()})
    return pd.DataFrame(cols)


def summarize_profile(df: pd.DataFrame, skip_first_pos: bool = True) -> pd.DataFrame:
    """Mean, median and share > 1 of the parallel ratio per site and layer.

    Position 0 (the BOS / attention-sink token, whose norm is atypical) is left
    out unless ``skip_first_pos=False``.
    """
    if skip_first_pos:
        df = df[df["pos"] > 0]
    g = df.groupby(["site", "layer"], sort=True)
    out = g["parallel_ratio"].agg(["mean", "median"]).add_prefix("parallel_ratio_")
    out["parallel_dominant"] = g["parallel_ratio"].apply(lambda s: float((s > 1).mean()))
    out["alpha_mean"] = g["alpha"].mean()
    out["norm_ratio_mean"] = g["norm_ratio"].mean()
    out["cosine_mean"] = g["cosine"].mean()
    out["n"] = g.size()
    return out.reset_index()
