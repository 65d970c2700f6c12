"""Sensitivity sweeps: perplexity as ``s_par`` or ``s_perp`` moves, per site (spec §5, Figure 3).

One sweep = one unedited pass over the corpus + one pass per edited grid point.
The corpus is tokenized and cut into windows once; every pass reuses the same
``[batch, t]`` tensors. The unedited pass also keeps the residual entering the
first edited block (``hook_resid_pre`` of block ``skip_first``, one
``[batch, t, d_model]`` tensor per batch, nothing else), and every edited pass
starts there instead of recomputing the blocks no edit touches
(:func:`resume_forward`). The ``(1, 1)`` point of each axis *is* the unedited
model: it is reported from the unedited pass, not recomputed.

:func:`layer_sweep` does the same for edits confined to one block, where the
saving is most of the model.

Losses are computed from the logits here (float32 cross-entropy per token,
summed in float64) over the windows of :func:`tlgeo.evals.perplexity.token_windows`,
exactly as :func:`tlgeo.evals.perplexity.perplexity` scores them.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Iterable, Sequence

import pandas as pd
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..hooks.edits import SKIP_FIRST, Edit
from ..geometry.parallel import check_scale
from ..hooks.adapter import HookList
from ..evals.perplexity import token_windows, tokenize_text
from ..runner.results import ResultLog, content_digest
from ..hooks.resume import resume_forward
from ..hooks.sites import UnknownSiteError, get_site
from ..models import Model, input_device
from ..runner.identity import run_identity
from .paper import S_PAR_GRID, S_PERP_GRID  # the paper's full grids (Figure 3)

__all__ = [
    "S_PAR_GRID",
    "S_PERP_GRID",
    "SWEEP_SITES",
    "SweepPoint",
    "sweep_points",
    "sensitivity_sweep",
    "layer_sweep",
]

SWEEP_SITES: tuple[str, ...] = ("value_excl_self", "value_full", "attn", "mlp", "block", "diag")

KEY = ("site", "layer", "s_par", "s_perp", "skip_first", "context", "max_tokens", "corpus", "model")
COLUMNS = ["site", "axis", "scale", "s_par", "s_perp", "ppl", "nll", "n_tokens", "delta_ppl"]


# --------------------------------------------------------------------------- grid


@dataclass(frozen=True)
class SweepPoint:
    """One grid point: ``site`` scaled along ``axis`` (``"s_par"`` or ``"s_perp"``) by ``scale``."""

    site: str
    axis: str
    scale: float

    @property
    def s_par(self) -> float:
        return self.scale if self.axis == "s_par" else 1.0

    @property
    def s_perp(self) -> float:
        return self.scale if self.axis == "s_perp" else 1.0

    @property
    def is_noop(self) -> bool:
        return self.s_par == 1.0 and self.s_perp == 1.0


def _grid(values: Iterable, name: str) -> tuple[float, ...]:
    out = []
    for v in values:
        out.append(float(check_scale(v, name)))
    if len(set(out)) != len(out):
        raise InputError(f"{name} has repeated values: {out}")
    return tuple(out)


def sweep_points(
    sites: Iterable[str] = SWEEP_SITES,
    s_par_grid: Iterable[float] = S_PAR_GRID,
    s_perp_grid: Iterable[float] = S_PERP_GRID,
) -> list[SweepPoint]:
    """Every (site, axis, scale) of a sweep, validated; no model needed.

    ``diag`` has only the ``s_par`` axis (its ``s_par`` scales the attention
    diagonal). Unknown sites, non-finite scales and an empty sweep raise
    ``ValueError``.
    """
    sites = [sites] if isinstance(sites, str) else list(sites)
    if not sites:
        raise InputError("empty sweep: no sites given")
    names = []
    for s in sites:
        try:
            names.append(get_site(s).name)
        except UnknownSiteError as e:
            raise InputError(str(e)) from None
    if len(set(names)) != len(names):
        raise InputError(f"repeated sites: {names}")
    par, perp = _grid(s_par_grid, "s_par_grid"), _grid(s_perp_grid, "s_perp_grid")
    points = []
    for name in names:
        points += [SweepPoint(name, "s_par", s) for s in par]
        if get_site(name).is_decomposition:
            points += [SweepPoint(name, "s_perp", s) for s in perp]
    if not points:
        raise InputError(
            f"empty sweep: no grid points for sites {names} (s_par_grid={list(par)}, s_perp_grid={list(perp)})"
        )
    return points


# --------------------------------------------------------------------------- scoring


@dataclass
class _Batch:
    tokens: Int[Tensor, "b t"]
    first: list[int]  # per window: first scored position (target_start)
    resid: Tensor | None = None  # residual entering the start block, from the clean run


def _corpus(
    model, text: str | Tensor, context: int, max_tokens: int | None, batch_size: int
) -> tuple[list[_Batch], Tensor]:
    """Tokenize once and group equal-length windows into batches (as ``perplexity`` does)."""
    n_ctx = model.cfg.n_ctx
    if context > n_ctx:
        raise InputError(f"context {context} exceeds the model's n_ctx {n_ctx}")
    if context < 2:
        raise InputError(f"context must be >= 2, got {context}")
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    if isinstance(text, str):
        if not text.strip():
            raise InputError("empty corpus: no text to score")
        ids = tokenize_text(model, text, max_tokens)
    else:
        ids = torch.as_tensor(text).reshape(-1).long().cpu()
        ids = ids[:max_tokens] if max_tokens is not None else ids
    if ids.numel() == 0:
        raise InputError("empty corpus: no tokens to score")
    bos = model.tokenizer.bos_token_id if getattr(model.cfg, "default_prepend_bos", True) else None
    windows = token_windows(ids, context, bos_token_id=bos)
    if not windows:
        raise InputError("empty corpus: a single token and no BOS leaves nothing to score")
    batches: list[_Batch] = []
    group: list[tuple[Tensor, int]] = []
    for w in windows + [None]:
        if group and (w is None or len(group) == batch_size or group[0][0].numel() != w[0].numel()):
            batches.append(_Batch(torch.stack([g[0] for g in group]), [g[1] for g in group]))
            group = []
        if w is not None:
            group.append(w)
    return batches, ids


def _nll_sum(logits: Float[Tensor, "b t v"], batch: _Batch) -> tuple[float, int]:
    """Summed NLL (float64) and count of the scored tokens of one batch."""
    inp = batch.tokens.to(logits.device)
    total, count = 0.0, 0
    for row, first in enumerate(batch.first):  # a row at a time: no copy of the whole logits
        part = F.cross_entropy(logits[row, first - 1 : -1].float(), inp[row, first:], reduction="none")
        total += part.double().sum().item()
        count += part.numel()
    return total, count


def _clean_pass(model, batches: list[_Batch], start: int, need_loss: bool) -> tuple[float, int] | None:
    """Unedited forward: keeps ``blocks.{start}.hook_resid_pre`` per batch (when ``start > 0``)
    and returns the summed NLL (when ``need_loss``; else stops at block ``start``)."""
    name = f"blocks.{start}.hook_resid_pre"
    total, count = 0.0, 0
    for b in batches:
        inp = b.tokens.to(input_device(model))
        if start == 0:
            logits = model(inp)
        elif need_loss:
            logits, cache = model.run_with_cache(inp, names_filter=name)
            b.resid = cache[name].detach()
        else:  # only the residual: stop after block ``start`` (its hook_resid_pre fires in it)
            stop = start + 1 if start + 1 < model.cfg.n_layers else None
            _, cache = model.run_with_cache(inp, names_filter=name, stop_at_layer=stop)
            b.resid = cache[name].detach()
            continue
        t, c = _nll_sum(logits, b)
        total, count = total + t, count + c
        del logits
    return (total, count) if need_loss else None


def _edited_pass(model, batches: list[_Batch], start: int, hooks: HookList) -> tuple[float, int]:
    total, count = 0.0, 0
    if start == 0:
        with model.hooks(fwd_hooks=hooks):
            for b in batches:
                logits = model(b.tokens.to(input_device(model)))
                t, c = _nll_sum(logits, b)
                total, count = total + t, count + c
                del logits
        return total, count
    for b in batches:
        logits = resume_forward(model, b.resid, start, hooks)
        t, c = _nll_sum(logits, b)
        total, count = total + t, count + c
        del logits
    return total, count


def _result(total: float, count: int) -> dict:
    nll = total / count
    return {"ppl": math.exp(nll), "nll": nll, "n_tokens": count}


def _model_name(model) -> str:
    return str(getattr(model.cfg, "model_name", None) or type(model).__name__)


# --------------------------------------------------------------------------- sweeps


def _run_sweep(
    model,
    text,
    edits: list[tuple[dict, Edit | None]],
    *,
    start: int,
    context: int,
    max_tokens: int | None,
    batch_size: int,
    log_path,
    progress: bool,
    key_extra: dict,
) -> tuple[dict, list[dict]]:
    """Shared engine: ``edits`` are ``(row_fields, Edit)`` pairs (``None`` for no-op points).

    Returns the baseline result and one row per edit (logged ones read back)."""
    for _, e in edits:  # validate layers/heads of every edit before any work
        if e is not None:
            e.hooks(model)
    batches, _ = _corpus(model, text, context, max_tokens, batch_size)
    key_extra = {
        **key_extra,
        "context": context,
        "max_tokens": max_tokens,  # corpus: the windows read, BOS included
        "corpus": content_digest([b.tokens for b in batches]),
        "model": _model_name(model),
    }
    log = (
        ResultLog(log_path, KEY, identity=run_identity(model).row(), content=("corpus",))  # corpus: its digest
        if log_path is not None
        else None
    )

    def key_of(fields: dict) -> dict:
        return {k: fields[k] if k in fields else key_extra.get(k) for k in KEY}

    base_key = key_of({"site": "none", "layer": None, "s_par": 1.0, "s_perp": 1.0})
    base = log.get(**base_key) if log is not None else None
    todo = [(f, e) for f, e in edits if e is not None and (log is None or not log.done(**key_of(f)))]

    with torch.inference_mode():
        if base is None or (todo and start > 0):
            res = _clean_pass(model, batches, start, need_loss=base is None)
            if base is None:
                base = {**base_key, **_result(*res)}
                if log is not None:
                    log.add(base)
        it = todo
        if progress:
            from tqdm.auto import tqdm

            it = tqdm(todo, desc="sweep", unit="edit")
        for fields, e in it:
            row = {**key_of(fields), **fields, **_result(*_edited_pass(model, batches, start, e.hooks(model)))}
            if log is not None:
                log.add(row)  # durable before the next point starts
            else:
                fields["_row"] = row

    rows = []
    for fields, e in edits:
        if e is None:
            row = {**key_of(fields), **fields, **{k: base[k] for k in ("ppl", "nll", "n_tokens")}}
        elif log is not None:
            row = log.get(**key_of(fields))
        else:
            row = fields.pop("_row")
        rows.append(row)
    return base, rows


def _frame(rows: list[dict], base: dict, columns: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    df["delta_ppl"] = df["ppl"] - base["ppl"]
    df = df[columns].reset_index(drop=True)
    df.attrs["baseline_ppl"] = base["ppl"]
    df.attrs["baseline_nll"] = base["nll"]
    df.attrs["n_tokens"] = base["n_tokens"]
    return df


def sensitivity_sweep(
    model: Model,
    text: str | Tensor,
    *,
    sites: Sequence[str] = SWEEP_SITES,
    s_par_grid: Iterable[float] = S_PAR_GRID,
    s_perp_grid: Iterable[float] = S_PERP_GRID,
    skip_first: int = SKIP_FIRST,
    context: int = 512,
    max_tokens: int | None = 2048,
    batch_size: int = 4,
    log_path: str | os.PathLike | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Perplexity of ``model`` on ``text`` with each site scaled along each axis (Figure 3).

    The ``s_par`` axis has ``s_perp = 1`` and vice versa; ``diag`` has only
    ``s_par``. Edits apply to blocks ``skip_first..``. Rows with ``s_par = s_perp
    = 1`` are the unedited run (measured once, never recomputed). With
    ``log_path`` every measured row (and the unedited one) is appended to a
    :class:`~tlgeo.runner.results.ResultLog` at once; a rerun measures only what is
    missing. Columns: ``site, axis, scale, s_par, s_perp, ppl, nll, n_tokens,
    delta_ppl``; ``df.attrs["baseline_ppl"]`` is the unedited perplexity.
    """
    points = sweep_points(sites, s_par_grid, s_perp_grid)
    n = model.cfg.n_layers
    if not isinstance(skip_first, int) or not 0 <= skip_first < n:
        raise InputError(f"skip_first must be an integer in 0..{n - 1}, got {skip_first!r}")
    edits = _point_edits(points, None, skip_first=skip_first)
    base, rows = _run_sweep(
        model,
        text,
        edits,
        start=skip_first,
        context=context,
        max_tokens=max_tokens,
        batch_size=batch_size,
        log_path=log_path,
        progress=progress,
        key_extra={"skip_first": skip_first},
    )
    return _frame(rows, base, COLUMNS)


def _point_edits(points, layer: int | None, **edit_kw) -> list[tuple[dict, Edit | None]]:
    """``(row key, Edit or None for the unedited point)`` per sweep point; ``edit_kw`` go to :class:`Edit`."""
    return [
        (
            {"site": p.site, "layer": layer, "axis": p.axis, "scale": p.scale, "s_par": p.s_par, "s_perp": p.s_perp},
            None if p.is_noop else Edit(p.site, p.s_par, p.s_perp, **edit_kw),
        )
        for p in points
    ]


def layer_sweep(
    model: Model,
    text: str | Tensor,
    site: str,
    layer: int,
    scales: Iterable[float],
    *,
    axis: str = "s_par",
    context: int = 512,
    max_tokens: int | None = 2048,
    batch_size: int = 4,
    log_path: str | os.PathLike | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Perplexity with ``site`` scaled along ``axis`` in block ``layer`` only.

    The unedited run is made once and keeps ``blocks.{layer}.hook_resid_pre``;
    each scale then runs blocks ``layer..`` only (:func:`resume_forward`).
    Columns: ``site, layer`` and those of :func:`sensitivity_sweep`.
    """
    if axis not in ("s_par", "s_perp"):
        raise InputError(f"axis must be 's_par' or 's_perp', got {axis!r}")
    n = model.cfg.n_layers
    if not isinstance(layer, int) or not 0 <= layer < n:
        raise InputError(f"layer {layer!r} out of range: the model has {n} layers (0..{n - 1})")
    grid = _grid(scales, "scales")
    points = sweep_points([site], grid if axis == "s_par" else (), grid if axis == "s_perp" else ())
    edits = _point_edits(points, layer, layers=layer, skip_first=0)
    base, rows = _run_sweep(
        model,
        text,
        edits,
        start=layer,
        context=context,
        max_tokens=max_tokens,
        batch_size=batch_size,
        log_path=log_path,
        progress=progress,
        key_extra={"skip_first": 0},
    )
    return _frame(rows, base, ["site", "layer", *COLUMNS[1:]])
