"""Heads (spec section 6, Figure 7): per-head parallel sign and causal sensitivity.

* :func:`head_alpha_map`: mean ``alpha`` (sign and size of the parallel part) per
  layer and head, from :func:`tlgeo.decomposition.observe.parallel_profile`.
* :func:`head_sensitivity`: remove the parallel part (``s_par=0``) in one head,
  or in all heads of a layer, and measure the change of mean loss per text
  against the unedited model, with a token-weighted bootstrap CI, a sign-flip
  p-value and Benjamini–Hochberg q-values (:mod:`tlgeo.stats`).
* :func:`head_patch_hook`, :func:`patched_hooks`: TransformerLens head-level
  activation patching on ``blocks.L.attn.hook_z`` composed with edits.
* :func:`selective_removal`: remove the parallel part only in heads that the
  sensitivity map says are harmless; perplexity against all-head removal, a
  random choice of as many heads, and the unedited model.
* :func:`tlgeo.decomposition.plots.plot_head_maps`: the two heatmaps side by side.

Hook order (patching + edits): TransformerLens runs the hooks of one hook point
in the order they are given. :func:`patched_hooks` puts **edits first, then
patches**, so a patched head holds exactly the clean activation even when the
edit also covers that head; the edit acts on every other head. With the reverse
order, an edit covering the patched head re-decomposes the clean ``z`` against
the *current* run's ``v`` and pattern, which mixes the two runs.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..hooks.edits import Edit
from ..hooks.adapter import HookList, resolve_layers
from .observe import parallel_profile
from ..evals.perplexity import perplexity, read_out_losses, tokenize_text
from ..runner.results import ResultLog
from ..hooks.resume import readout_ok, resume_forward, resumed_last_block_output
from ..hooks.sites import get_site
from ..stats.resampling import benjamini_hochberg, paired_test
from ..models import Model
from ..runner.identity import run_identity

__all__ = [
    "head_alpha_map",
    "text_batches",
    "per_text_loss",
    "head_sensitivity",
    "head_patch_hook",
    "patched_hooks",
    "select_heads",
    "head_edits",
    "selective_removal",
]

ALL = "all"


# ---------------------------------------------------------------------------
# Alpha map
# ---------------------------------------------------------------------------


def head_alpha_map(
    model: Model,
    tokens: Int[Tensor, "batch pos"] | str,
    site: str = "value_excl_self",
    *,
    layers: Iterable[int] | None = None,
    skip_first_pos: bool = True,
    **profile_kwargs,
) -> pd.DataFrame:
    """Per (layer, head): ``alpha_mean``, ``abs_alpha_mean``, ``share_positive``
    (of tokens with ``alpha > 0``), ``parallel_ratio_mean``/``_median`` and ``n`` tokens.

    ``tokens``: ``[batch, pos]`` ids or a text (see :func:`parallel_profile`,
    which gets ``profile_kwargs``); ``site``: a per-head decomposition site
    (``value_excl_self`` or ``value_full``). Position 0 (the BOS sink) is left
    out unless ``skip_first_pos=False``.
    """
    s = get_site(site)
    if not (s.per_head and s.is_decomposition):
        raise InputError(f"site {s.name!r} is not a per-head decomposition site (value_full, value_excl_self)")
    df = parallel_profile(model, tokens, sites=[s.name], layers=layers, **profile_kwargs)
    if skip_first_pos:
        df = df[df["pos"] > 0]
    if df.empty:
        raise InputError("no tokens left for the alpha map (sequences of length 1 with skip_first_pos)")
    g = df.groupby(["layer", "head"], sort=True)
    out = pd.DataFrame(
        {
            "alpha_mean": g["alpha"].mean(),
            "abs_alpha_mean": g["alpha"].apply(lambda a: a.abs().mean()),
            "share_positive": g["alpha"].apply(lambda a: float((a > 0).mean())),
            "parallel_ratio_mean": g["parallel_ratio"].mean(),
            "parallel_ratio_median": g["parallel_ratio"].median(),
            "n": g.size(),
        }
    ).reset_index()
    out.insert(0, "site", s.name)
    return out


# ---------------------------------------------------------------------------
# Texts and losses
# ---------------------------------------------------------------------------


def text_batches(
    model: Model,
    texts: Int[Tensor, "n pos"] | Sequence[str] | Sequence[Tensor],
    *,
    max_len: int | None = 512,
    batch_size: int = 8,
) -> list[Int[Tensor, "b pos"]]:
    """Group texts into batches of equal length (no padding).

    ``texts``: a ``[n, pos]`` id tensor (one text per row, e.g. from
    :func:`tlgeo.decomposition.observe.corpus_batches`), 1-D id tensors, or strings
    (tokenized, BOS first when the model prepends one, cut to ``max_len``).
    Batches keep the texts' order within each length.
    """
    if batch_size < 1:
        raise InputError(f"batch_size must be >= 1, got {batch_size}")
    if isinstance(texts, Tensor):
        if texts.ndim != 2:
            raise InputError(f"a token tensor must be [n_texts, pos], got {tuple(texts.shape)}")
        rows = list(texts)
    else:
        rows = []
        bos = model.tokenizer.bos_token_id if model.cfg.default_prepend_bos else None
        for t in texts:
            if isinstance(t, str):
                ids = tokenize_text(model, t, max_len)
                if bos is not None:
                    ids = torch.cat([torch.tensor([bos]), ids])
                rows.append(ids[:max_len] if max_len else ids)
            else:
                rows.append(torch.as_tensor(t).reshape(-1))
    if not rows:
        raise InputError("no texts given")
    n_ctx = model.cfg.n_ctx
    for i, r in enumerate(rows):
        if r.numel() < 2:
            raise InputError(f"text {i} has {r.numel()} token(s): at least 2 are needed for a loss")
        if r.numel() > n_ctx:
            raise InputError(f"text {i} has {r.numel()} tokens, above the model's context n_ctx={n_ctx}")
    by_len: dict[int, list[Tensor]] = {}
    for r in rows:
        by_len.setdefault(r.numel(), []).append(r.long())
    return [
        torch.stack(group[i : i + batch_size])
        for _, group in sorted(by_len.items())
        for i in range(0, len(group), batch_size)
    ]


def per_text_loss(logits: Float[Tensor, "b pos vocab"], tokens: Int[Tensor, "b pos"]) -> Float[Tensor, "b"]:
    """Mean next-token NLL (nats, float32) of each text; ``pos - 1`` tokens scored per text.

    One text at a time: a row of ``logits`` is contiguous, so no copy of the whole
    ``[b, pos, vocab]`` tensor is made (it is the largest tensor of a forward)."""
    tokens = tokens.to(logits.device)
    return torch.stack(
        [F.cross_entropy(logits[i, :-1].float(), tokens[i, 1:]).float() for i in range(tokens.shape[0])]
    ).cpu()


def _fingerprint(tokens: Tensor) -> str:
    return hashlib.sha1(tokens.cpu().numpy().astype(np.int64).tobytes()).hexdigest()[:16]


# ---------------------------------------------------------------------------
# Sensitivity
# ---------------------------------------------------------------------------


def head_sensitivity(
    model: Model,
    texts_or_token_batches,
    site: str = "value_excl_self",
    layers: int | Iterable[int] | None = None,
    *,
    s_par: float = 0.0,
    n_perm: int = 10000,
    seed: int = 0,
    batch_size: int = 8,
    max_len: int | None = 512,
    start_at_layer: bool = True,
    log_path: str | os.PathLike | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Change of mean loss when the parallel part is removed in one head, or in all
    heads of a layer, with bootstrap CIs, sign-flip p-values and BH q-values.

    For every layer ``L`` in ``layers`` (default: all) and every condition
    ``heads = [h]`` (``h = 0..n_heads-1``) and ``heads = None`` (``head == "all"``),
    ``Edit(site, s_par, layers=L, heads=...)`` is applied. Per text ``i``:
    ``d_i = mean loss edited - mean loss unedited``, weighted by its scored
    tokens. The unedited losses come from one forward per batch, which also
    caches ``resid_pre`` of every chosen layer; with ``start_at_layer`` each
    edited forward then starts at ``L`` from that cache (checked against a full
    forward on the first batch; falls back to full forwards on a mismatch).

    ``texts_or_token_batches``: see :func:`text_batches`, or a list of ``[b, pos]``
    batches. ``log_path``: one JSON line per (batch, layer) (and per batch for the
    unedited losses); a rerun skips what is stored. q-values are BH over all rows.

    Returns one row per (layer, head): ``site, layer, head, delta_loss, ci_low,
    ci_high, p, q, n_texts, n_tokens, base_loss, edited_loss``.
    """
    s = get_site(site)
    if not s.per_head:
        raise InputError(
            f"site {s.name!r} acts on the whole residual vector; head sensitivity needs a "
            "per-head site (value_excl_self, value_full, diag)"
        )
    cfg = model.cfg
    chosen = resolve_layers(cfg, layers)
    batches = _as_batches(model, texts_or_token_batches, batch_size, max_len)
    Edit(s, s_par, layers=chosen[0], heads=[0])  # validates s_par for the site
    run = _SensitivityRun(
        model,
        s,
        s_par,
        chosen,
        [*range(cfg.n_heads), ALL],
        _sensitivity_log(model, log_path),
        getattr(cfg, "device", None) or "cpu",
        _StartAt(start_at_layer),
    )
    it = list(enumerate(batches))
    if progress:  # one unit per (batch, layer): each is n_heads + 1 edited forwards
        from tqdm.auto import tqdm

        run.bar = tqdm(total=len(it) * len(chosen), desc="head sensitivity", unit="layer")
    with torch.inference_mode():
        for bi, toks in it:
            run.batch(bi, toks)
    if run.bar is not None:
        run.bar.close()
    return _sensitivity_table(s.name, run.edited, run.base, run.n_tok, n_perm, seed)


def _sensitivity_log(model, log_path: str | os.PathLike | None) -> ResultLog | None:
    """The run's log of per-batch losses (``tokens``: the batch's digest), or None without ``log_path``."""
    if not log_path:
        return None
    return ResultLog(
        log_path,
        ("kind", "site", "s_par", "batch", "tokens", "layer"),
        identity=run_identity(model).row(),
        content=("tokens",),
    )


@dataclass
class _StartAt:
    """Whether edited forwards start at their layer from the cached ``resid_pre`` (checked once, on the first)."""

    use: bool
    checked: bool = False

    def resid(self, model, inp: Tensor, cache, site, s_par: float, layer: int) -> Tensor | None:
        """The cached ``resid_pre`` of ``layer`` to start from, or None for a full forward."""
        resid = cache[f"blocks.{layer}.hook_resid_pre"] if self.use else None
        if self.use and not self.checked:  # once, on the first forward that starts at a layer
            self.use = self.checked = _check_start_at_layer(model, inp, resid, site, s_par, layer)
            if not self.use:
                resid = None
        return resid


@dataclass(eq=False)
class _SensitivityRun:
    """What :func:`head_sensitivity` gathers batch by batch: per batch ``[b]`` unedited losses and scored
    tokens, per (layer, condition) the edited losses."""

    model: Model
    site: object
    s_par: float
    chosen: list[int]
    conditions: list[int | str]
    log: ResultLog | None
    device: object
    start: _StartAt
    bar: object = None
    base: list[Tensor] = field(default_factory=list)
    n_tok: list[Tensor] = field(default_factory=list)
    edited: dict = field(init=False)  # (layer, condition) -> per batch [b] edited losses

    def __post_init__(self):
        self.edited = {(L, c): [] for L in self.chosen for c in self.conditions}

    def batch(self, bi: int, toks: Tensor) -> None:
        """One batch: its unedited losses, then every chosen layer's edited ones (stored rows reused)."""
        log, chosen = self.log, self.chosen
        key = {"site": self.site.name, "s_par": float(self.s_par), "batch": bi, "tokens": _fingerprint(toks)}
        rows = {L: log.get(kind="edited", layer=L, **key) for L in chosen} if log else {}
        brow = log.get(kind="base", layer=-1, **key) if log else None
        todo = [L for L in chosen if rows.get(L) is None]
        inp = toks.to(self.device)
        b_loss, cache = self._base_losses(inp, key, brow, todo)
        self.base.append(b_loss)
        self.n_tok.append(torch.full((toks.shape[0],), toks.shape[1] - 1))
        for L in chosen:
            if self.bar is not None:
                self.bar.set_postfix_str(f"batch {bi}, layer {L}", refresh=False)
            if rows.get(L) is not None:
                for c, v in zip(self.conditions, rows[L]["loss"]):
                    self.edited[(L, c)].append(torch.tensor(v))
            else:
                resid = self.start.resid(self.model, inp, cache, self.site, self.s_par, L)
                losses = _edited_losses(self.model, inp, resid, self.site, self.s_par, L, self.conditions)
                for c, x in zip(self.conditions, losses):
                    self.edited[(L, c)].append(x)
                if log:
                    log.add({"kind": "edited", "layer": L, **key, "loss": [x.tolist() for x in losses]})
            if self.bar is not None:
                self.bar.update(1)

    def _base_losses(self, inp: Tensor, key: dict, brow: dict | None, todo: list[int]) -> tuple[Tensor, object]:
        """``[b]`` unedited losses (stored, or one forward that also caches ``resid_pre`` of ``todo``), the cache."""
        if brow is not None and not todo:
            return torch.tensor(brow["loss"]), None
        names = {f"blocks.{L}.hook_resid_pre" for L in todo} if self.start.use else set()
        logits, cache = self.model.run_with_cache(inp, names_filter=lambda n: n in names)
        b_loss = per_text_loss(logits, inp)
        del logits
        if brow is None and self.log:
            self.log.add({"kind": "base", "layer": -1, **key, "loss": b_loss.tolist()})
        return b_loss, cache


def _edited_losses(model, inp: Tensor, resid: Tensor | None, site, s_par: float, layer: int, conditions) -> list:
    """Per condition (one head, or ``ALL``): the ``[b]`` losses with the edit at ``layer``, from ``resid`` if given."""
    losses = []
    by_row = resid is not None and readout_ok(model, inp)
    for c in conditions:
        e = Edit(site, s_par, layers=layer, skip_first=0, heads=None if c == ALL else [c])
        if by_row:  # stop at the last block, read each text out alone: no [b, pos, vocab] logits
            final = resumed_last_block_output(model, resid, layer, e.hooks(model))
            losses.append(read_out_losses(model, final, inp).mean(-1).cpu())
            del final
        else:
            out = (
                resume_forward(model, resid, layer, e.hooks(model))
                if resid is not None
                else model.run_with_hooks(inp, fwd_hooks=e.hooks(model))
            )
            losses.append(per_text_loss(out, inp))
            del out  # free the logits before the next forward allocates its own
    return losses


def _sensitivity_table(site: str, edited: dict, base: list, n_tok: list, n_perm: int, seed: int) -> pd.DataFrame:
    """One row per (layer, head): the token-weighted paired test of edited against unedited losses, BH q."""
    base_all = torch.cat(base).double().numpy()
    weights = torch.cat(n_tok).double().numpy()
    rng = np.random.default_rng(seed)
    out_rows = []
    for (L, c), parts in edited.items():
        e_loss = torch.cat(parts).double().numpy()
        t = paired_test(e_loss - base_all, weights, n_perm=n_perm, seed=rng)
        out_rows.append(
            {
                "site": site,
                "layer": L,
                "head": c,
                "delta_loss": t.estimate,
                "ci_low": t.ci_low,
                "ci_high": t.ci_high,
                "p": t.p,
                "n_texts": t.n_texts,
                "n_tokens": int(t.n_tokens),
                "base_loss": float((base_all * weights).sum() / weights.sum()),
                "edited_loss": float((e_loss * weights).sum() / weights.sum()),
            }
        )
    df = pd.DataFrame(out_rows)
    df.insert(df.columns.get_loc("p") + 1, "q", benjamini_hochberg(df["p"].to_numpy()))
    df["head"] = df["head"].astype(object)
    return df


def _as_batches(model, texts, batch_size: int, max_len: int | None) -> list[Tensor]:
    if isinstance(texts, (list, tuple)) and texts and all(isinstance(t, Tensor) and t.ndim == 2 for t in texts):
        for b in texts:
            if b.shape[1] > model.cfg.n_ctx:
                raise InputError(f"batch of length {b.shape[1]} exceeds n_ctx={model.cfg.n_ctx}")
            if b.shape[1] < 2:
                raise InputError("texts need at least 2 tokens for a loss")
        return [b.long() for b in texts]
    return text_batches(model, texts, max_len=max_len, batch_size=batch_size)


def _check_start_at_layer(model, inp: Tensor, resid: Tensor, site, s_par: float, layer: int) -> bool:
    """Whether an edited forward started at ``layer`` from cached ``resid`` matches a full one."""
    hooks = Edit(site, s_par, layers=layer, skip_first=0).hooks(model)
    try:
        started = per_text_loss(resume_forward(model, resid, layer, hooks), inp)
    except Exception as err:  # noqa: BLE001 - any failure means: use full forwards
        warnings.warn(f"starting at block {layer} failed ({err!r}); using full forwards")
        return False
    full = per_text_loss(
        model.run_with_hooks(inp, fwd_hooks=Edit(site, s_par, layers=layer, skip_first=0).hooks(model)), inp
    )
    diff = (started - full).abs().max().item()
    if diff > 1e-4:
        warnings.warn(f"starting at block {layer} differs from a full forward by {diff:.2e} nats; using full forwards")
        return False
    return True


# ---------------------------------------------------------------------------
# Activation patching composed with edits
# ---------------------------------------------------------------------------


def head_patch_hook(layer: int, head: int, clean_z: Float[Tensor, "batch pos head d_head"]) -> tuple[str, callable]:
    """TransformerLens-style patch: ``blocks.{layer}.attn.hook_z[:, :, head] = clean_z[:, :, head]``.

    ``clean_z``: the clean run's ``hook_z`` of that layer (e.g. ``cache[...]``),
    same batch and positions as the patched run.
    """

    def patch(z: Tensor, hook) -> Tensor:
        if z.shape != clean_z.shape:
            raise InputError(f"{hook.name}: clean activation {tuple(clean_z.shape)} does not match {tuple(z.shape)}")
        z = z.clone()
        z[:, :, head] = clean_z[:, :, head].to(z.device, z.dtype)
        return z

    return (f"blocks.{layer}.attn.hook_z", patch)


def patched_hooks(model: Model, edits: Edit | Iterable[Edit], patches: Iterable[tuple[str, callable]]) -> HookList:
    """Edit hooks first, then patch hooks (the documented order, see the module docstring)."""
    edits = [edits] if isinstance(edits, Edit) else list(edits)
    return [h for e in edits for h in e.hooks(model)] + list(patches)


# ---------------------------------------------------------------------------
# Selective removal
# ---------------------------------------------------------------------------


def select_heads(
    sensitivity: pd.DataFrame, *, threshold: float | None = None, k: int | None = None
) -> dict[int, list[int]]:
    """Heads whose single-head removal is harmless by the map, as ``{layer: [heads]}``.

    ``threshold``: heads with ``ci_high < threshold`` (the CI's upper bound on the
    loss increase stays below it); ``k``: the ``k`` heads with the smallest
    ``delta_loss``. Give exactly one.
    """
    if (threshold is None) == (k is None):
        raise InputError("give exactly one of threshold= or k=")
    single = sensitivity[sensitivity["head"] != ALL]
    if single.empty:
        raise InputError("the sensitivity map has no single-head rows")
    if threshold is not None:
        picked = single[single["ci_high"] < threshold]
    else:
        if k < 0:
            raise InputError(f"k must be >= 0, got {k}")
        picked = single.sort_values(["delta_loss", "layer", "head"]).head(k)
    out: dict[int, list[int]] = {}
    for L, h in sorted(zip(picked["layer"].astype(int), picked["head"].astype(int))):
        out.setdefault(L, []).append(h)
    return out


def head_edits(site: str, heads: Mapping[int, Sequence[int]], s_par: float = 0.0) -> list[Edit]:
    """One :class:`Edit` per layer with its head list (layers without heads are skipped)."""
    return [Edit(site, s_par, layers=L, skip_first=0, heads=tuple(hs)) for L, hs in sorted(heads.items()) if hs]


def selective_removal(
    model: Model,
    text: str | Tensor,
    sensitivity: pd.DataFrame,
    threshold: float | None = None,
    *,
    k: int | None = None,
    site: str | None = None,
    s_par: float = 0.0,
    n_random: int = 1,
    seed: int = 0,
    context: int = 512,
    max_tokens: int | None = 4096,
    batch_size: int = 4,
) -> pd.DataFrame:
    """Perplexity with the parallel part removed only in "harmless" heads.

    Heads are chosen by :func:`select_heads` (``threshold`` on ``ci_high``, or
    the ``k`` least sensitive) among the layers of ``sensitivity``. Conditions
    (rows): ``unedited``; ``selective`` (one Edit per layer with its heads);
    ``random`` (``n_random`` draws of as many heads, uniformly from the same
    layers, seeded; a control for the map); ``all heads`` (every head of the
    layers in the map). Columns: ``condition, n_heads, heads, ppl, nll,
    n_tokens, delta_ppl, recovered`` (share of the all-head perplexity increase
    that the selective edit avoids; NaN for other rows).
    """
    site = get_site(site or sensitivity["site"].iloc[0]).name
    layers = sorted(int(L) for L in sensitivity["layer"].unique())
    n_heads = model.cfg.n_heads
    chosen = select_heads(sensitivity, threshold=threshold, k=k)
    n_sel = sum(len(h) for h in chosen.values())
    rng = np.random.default_rng(seed)
    pool = [(L, h) for L in layers for h in range(n_heads)]

    conds: list[tuple[str, dict[int, list[int]]]] = [("unedited", {}), ("selective", chosen)]
    for i in range(n_random):
        idx = rng.choice(len(pool), size=n_sel, replace=False)
        pick: dict[int, list[int]] = {}
        for L, h in sorted(pool[j] for j in idx):
            pick.setdefault(L, []).append(h)
        conds.append((f"random{i}" if n_random > 1 else "random", pick))
    conds.append(("all heads", {L: list(range(n_heads)) for L in layers}))

    rows = []
    for name, heads in conds:
        hooks = [h for e in head_edits(site, heads, s_par) for h in e.hooks(model)]
        res = perplexity(model, text, context=context, max_tokens=max_tokens, batch_size=batch_size, fwd_hooks=hooks)
        rows.append(
            {
                "condition": name,
                "site": site,
                "n_heads": sum(len(v) for v in heads.values()),
                "heads": "; ".join(f"L{L}:{','.join(map(str, hs))}" for L, hs in sorted(heads.items())),
                **res.to_dict(),
            }
        )
    df = pd.DataFrame(rows)
    base = df.loc[df["condition"] == "unedited", "ppl"].iloc[0]
    df["delta_ppl"] = df["ppl"] - base
    full = df.loc[df["condition"] == "all heads", "delta_ppl"].iloc[0]
    df["recovered"] = np.nan
    if full != 0:
        sel = df["condition"] == "selective"
        df.loc[sel, "recovered"] = 1 - df.loc[sel, "delta_ppl"] / full
    return df
