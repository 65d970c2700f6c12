"""The MLP-internal carrier (spec section 7, the paper's Table 10).

The carrier is the MLP's hidden activation ``h`` (``blocks.L.mlp.hook_post`` in
the bridge; ``act(W_gate x) * (W_up x)`` for gated MLPs, ``act(W_in x + b_in)``
otherwise), width ``d_mlp``, with ``hook_mlp_out = h @ W_out (+ b_out)`` and
``W_out = model.blocks[L].mlp.W_out`` of shape ``[d_mlp, d_model]``
(:func:`carrier_reconstruction` checks this numerically).

``h`` is cut into ``G = ceil(d_mlp / d_model)`` disjoint blocks ``h_g`` of
``d_model`` coordinates, ``I_g = [g d_model, (g+1) d_model)``. **When ``d_mlp`` is
not a multiple of ``d_model`` the last block is narrower** (width
``w = d_mlp - (G-1) d_model``; SmolLM2-135M: 1536 = 2 x 576 + 384, tiny:llama:
160 = 2 x 64 + 32). ``P(u; r) = s_par u_par + s_perp u_perp`` is the scaling edit
of ``u`` relative to ``r`` (:func:`tlgeo.geometry.scale_components`).

Sites (both are edits of one forward pass, through :func:`tlgeo.hooks.adapter.site_hooks`):

* ``h_vs_x``: ``h -> concat_g P(h_g; x)`` at ``mlp.hook_post``, with ``x`` the
  MLP's residual input (``hook_resid_mid``; ``hook_resid_pre`` for parallel
  attn+MLP blocks); the model applies ``W_out`` itself, so the MLP output is
  ``sum_g W_out[I_g]^T P(h_g; x) (+ b_out)``.
* ``y_vs_h`` ("y_g vs h_g"): ``hook_mlp_out -> sum_g P(y_g; h_g) (+ b_out, once,
  unedited)`` with ``y_g = h_g @ W_out[I_g]`` and ``h`` read from ``mlp.hook_post``
  earlier in the same forward.

The narrow last block (``narrow="include"``, the default) pairs coordinate ``i``
of a block with coordinate ``i`` of its reference, as the full blocks do:

* ``h_vs_x``: the reference of the narrow ``h_g`` (width ``w``) is ``x[:w]``,
  the first ``w`` coordinates of ``x``. (Zero-padding ``h_g`` to ``d_model``
  instead is not an edit of ``h``: ``P`` would write into the padded coordinates,
  which ``h`` does not have.)
* ``y_vs_h``: the reference of ``y_g`` (width ``d_model``) is ``h_g`` zero-padded
  to ``d_model``, i.e. ``alpha = <y_g[:w], h_g> / ||h_g||^2``; the result is a
  full ``d_model`` vector, so this is well-defined.

``narrow="skip"`` leaves the narrow block unedited (its ``h_g`` resp. ``y_g``
passes through). Without a narrow block both choices are the same edit.

Scales are numbers (or tensors broadcastable to ``[..., G]``, one per block
vector). Computed in float32 (float64 for float64 inputs) whatever the model
dtype; the no-op ``(1, 1)`` returns the hook's tensor itself.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Iterable, Mapping

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError, UnknownNameError
from ..hooks.edits import SKIP_FIRST, Edit
from ..geometry.parallel import Scale, check_scale, compute_dtype, is_unit, scaled_delta
from ..hooks.adapter import HookList, check_hook_names, resolve_layers, site_hooks
from ..evals.perplexity import perplexity, scored_tokens
from ..runner.results import ResultLog, content_digest
from ..hooks.sites import Site, Update
from ..models import Model, read_weights
from ..runner.identity import run_identity

__all__ = [
    "NARROW",
    "CARRIER_SITES",
    "n_blocks",
    "block_slices",
    "narrow_width",
    "pad_blocks",
    "unpad_blocks",
    "carrier_delta",
    "scale_carrier",
    "block_outputs",
    "output_delta",
    "scale_output",
    "mlp_out_weights",
    "carrier_reconstruction",
    "CarrierEdit",
    "mlp_carrier_table",
    "carrier_table_wide",
]

NARROW = ("include", "skip")
REMOVALS = ("no_para", "no_perp")  # s_par = 0, s_perp = 0

# ---------------------------------------------------------------- pure tensor math


def n_blocks(d_mlp: int, d_model: int) -> int:
    """``G = ceil(d_mlp / d_model)`` blocks of width ``d_model`` (the last one may be narrower)."""
    if not (isinstance(d_mlp, int) and isinstance(d_model, int)) or d_mlp < 1 or d_model < 1:
        raise InputError(f"d_mlp and d_model must be positive integers, got {d_mlp!r}, {d_model!r}")
    return -(-d_mlp // d_model)


def block_slices(d_mlp: int, d_model: int) -> list[slice]:
    """Index ranges ``I_g`` of the ``G`` blocks of ``range(d_mlp)``; the last is narrower
    when ``d_mlp`` is not a multiple of ``d_model``."""
    G = n_blocks(d_mlp, d_model)
    return [slice(g * d_model, min((g + 1) * d_model, d_mlp)) for g in range(G)]


def narrow_width(d_mlp: int, d_model: int) -> int | None:
    """Width of the narrow last block, or ``None`` when ``d_model`` divides ``d_mlp``."""
    n_blocks(d_mlp, d_model)
    w = d_mlp % d_model
    return w or None


def pad_blocks(h: Float[Tensor, "... d_mlp"], d_model: int) -> Float[Tensor, "... G d_model"]:
    """``h`` cut into ``G`` blocks of ``d_model``, the narrow last block zero-padded."""
    d_mlp = h.shape[-1]
    G = n_blocks(d_mlp, d_model)
    pad = G * d_model - d_mlp
    if pad:
        h = torch.nn.functional.pad(h, (0, pad))
    return h.reshape(*h.shape[:-1], G, d_model)


def unpad_blocks(u: Float[Tensor, "... G d_model"], d_mlp: int) -> Float[Tensor, "... d_mlp"]:
    """Inverse of :func:`pad_blocks`: concatenate the blocks, drop the padding."""
    return u.flatten(-2)[..., :d_mlp]


def _block_mask(d_mlp: int, d_model: int, narrow: str, device, dtype) -> Tensor | None:
    """``[G, 1]`` mask with 0 on the narrow block when ``narrow == "skip"``, else ``None``."""
    _check_narrow(narrow)
    if narrow == "include" or narrow_width(d_mlp, d_model) is None:
        return None
    mask = torch.ones(n_blocks(d_mlp, d_model), 1, device=device, dtype=dtype)
    mask[-1] = 0
    return mask


def _check_narrow(narrow: str) -> None:
    if narrow not in NARROW:
        raise InputError(f"narrow must be one of {NARROW}, got {narrow!r}")


def carrier_delta(
    h: Float[Tensor, "... d_mlp"],
    x: Float[Tensor, "... d_model"],
    s_par: Scale = 1.0,
    s_perp: Scale = 1.0,
    narrow: str = "include",
) -> Float[Tensor, "... d_mlp"]:
    """``concat_g P(h_g; x) - h`` ("h vs x"), in the compute dtype.

    Block ``g`` of ``h`` is split relative to ``x`` (the narrow last block of width
    ``w`` relative to ``x[..., :w]``; with ``narrow="skip"`` it is left alone).
    ``x`` broadcasts against ``h`` over the leading axes.
    """
    d_mlp, d_model = h.shape[-1], x.shape[-1]
    n_blocks(d_mlp, d_model)  # validates the widths
    dt = compute_dtype(h, x)
    hb = pad_blocks(h.to(dt), d_model)  # [..., G, d]
    # the reference of block g is x, cut to the block's width (zeros past it)
    width = torch.tensor([s.stop - s.start for s in block_slices(d_mlp, d_model)], device=h.device)
    keep = (torch.arange(d_model, device=h.device) < width[:, None]).to(dt)  # [G, d]
    ref = x.to(dt).unsqueeze(-2) * keep
    delta = scaled_delta(hb, ref, s_par, s_perp)  # padded coordinates stay 0
    mask = _block_mask(d_mlp, d_model, narrow, h.device, dt)
    if mask is not None:
        delta = delta * mask
    return unpad_blocks(delta, d_mlp)


def scale_carrier(
    h: Float[Tensor, "... d_mlp"],
    x: Float[Tensor, "... d_model"],
    s_par: Scale = 1.0,
    s_perp: Scale = 1.0,
    narrow: str = "include",
) -> Float[Tensor, "... d_mlp"]:
    """``concat_g P(h_g; x)`` in ``h``'s dtype; the no-op ``(1, 1)`` returns ``h`` itself."""
    s_par, s_perp = check_scale(s_par, "s_par"), check_scale(s_perp, "s_perp")
    _check_narrow(narrow)
    if is_unit(s_par) and is_unit(s_perp):
        return h
    delta = carrier_delta(h, x, s_par, s_perp, narrow)
    return (h.to(delta.dtype) + delta).to(h.dtype)


def block_outputs(
    h: Float[Tensor, "... d_mlp"], W_out: Float[Tensor, "d_mlp d_model"]
) -> Float[Tensor, "... G d_model"]:
    """``y_g = h[..., I_g] @ W_out[I_g]`` per block (no bias), in the compute dtype.

    ``sum_g y_g + b_out`` is the MLP output. Blocks have width ``d_model = W_out.shape[1]``.
    """
    d_mlp, d_model = W_out.shape
    if h.shape[-1] != d_mlp:
        raise InputError(f"h has width {h.shape[-1]} but W_out is {tuple(W_out.shape)} ([d_mlp, d_model])")
    dt = compute_dtype(h, W_out)
    hb = pad_blocks(h.to(dt), d_model)  # [..., G, d]
    Wb = pad_blocks(W_out.to(dt).T, d_model)  # [d_model(out), G, d(in)]
    return torch.einsum("...gi,ogi->...go", hb, Wb)


def output_delta(
    h: Float[Tensor, "... d_mlp"],
    W_out: Float[Tensor, "d_mlp d_model"],
    s_par: Scale = 1.0,
    s_perp: Scale = 1.0,
    narrow: str = "include",
) -> Float[Tensor, "... d_model"]:
    """``sum_g (P(y_g; h_g) - y_g)`` ("y_g vs h_g"), in the compute dtype.

    The reference of ``y_g`` is ``h_g`` (the narrow last block zero-padded to
    ``d_model``; with ``narrow="skip"`` its ``y_g`` is left alone).
    """
    d_mlp, d_model = W_out.shape
    y = block_outputs(h, W_out)  # [..., G, d]
    ref = pad_blocks(h.to(y.dtype), d_model)
    delta = scaled_delta(y, ref, s_par, s_perp)
    mask = _block_mask(d_mlp, d_model, narrow, h.device, y.dtype)
    if mask is not None:
        delta = delta * mask
    return delta.sum(-2)


def scale_output(
    mlp_out: Float[Tensor, "... d_model"],
    h: Float[Tensor, "... d_mlp"],
    W_out: Float[Tensor, "d_mlp d_model"],
    s_par: Scale = 1.0,
    s_perp: Scale = 1.0,
    narrow: str = "include",
) -> Float[Tensor, "... d_model"]:
    """``mlp_out + sum_g (P(y_g; h_g) - y_g)``: each block's contribution replaced, the
    bias (in ``mlp_out``) kept once. The no-op ``(1, 1)`` returns ``mlp_out`` itself."""
    s_par, s_perp = check_scale(s_par, "s_par"), check_scale(s_perp, "s_perp")
    _check_narrow(narrow)
    if mlp_out.shape[-1] != W_out.shape[1]:
        raise InputError(f"mlp_out has width {mlp_out.shape[-1]}, W_out is {tuple(W_out.shape)}")
    if is_unit(s_par) and is_unit(s_perp):
        return mlp_out
    delta = output_delta(h, W_out, s_par, s_perp, narrow)
    return (mlp_out.to(delta.dtype) + delta).to(mlp_out.dtype)


# ---------------------------------------------------------------- model adapters


def mlp_out_weights(model: Model, layer: int) -> tuple[Float[Tensor, "d_mlp d_model"], Tensor | None]:
    """``(W_out [d_mlp, d_model], b_out [d_model] or None)`` of block ``layer``'s MLP, as the
    bridge exposes them (``model.blocks[L].mlp.W_out`` / ``.b_out``)."""
    (layer,) = resolve_layers(model.cfg, layer)
    W, b = read_weights(model.blocks[layer].mlp, "W_out", "b_out")  # from the offload where the block is
    if W is None:
        raise AttributeError(f"block {layer}'s MLP exposes no W_out")
    d_mlp, d_model = model.cfg.d_mlp, model.cfg.d_model
    if tuple(W.shape) != (d_mlp, d_model):
        raise InputError(
            f"block {layer}: W_out has shape {tuple(W.shape)}, expected [d_mlp, d_model] = {[d_mlp, d_model]}"
        )
    return W, b


def carrier_reconstruction(
    model: Model, tokens: Int[Tensor, "batch pos"], layers: Iterable[int] | None = None
) -> pd.DataFrame:
    """Per block: ``max |h @ W_out + b_out - mlp_out|`` (``max_abs_err``) and the same
    divided by ``max |mlp_out|`` (``rel_err``), with ``h = mlp.hook_post`` — checks the
    carrier's hook name and ``W_out``'s orientation. Also ``d_mlp, d_model, G, narrow_width``."""
    layers = resolve_layers(model.cfg, layers)
    names = [f"blocks.{l}.{s}" for l in layers for s in ("mlp.hook_post", "hook_mlp_out")]
    check_hook_names(model, names)
    rows = []
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda n: n in set(names))
    for l in layers:
        W, b = mlp_out_weights(model, l)
        h, out = cache[f"blocks.{l}.mlp.hook_post"], cache[f"blocks.{l}.hook_mlp_out"]
        dt = compute_dtype(h, W)
        with torch.no_grad():
            rec = block_outputs(h, W).sum(-2) + (0 if b is None else b.to(dt))
        err = (rec - out.to(dt)).abs().max().item()
        rows.append(
            {
                "layer": l,
                "max_abs_err": err,
                "rel_err": err / max(out.abs().max().item(), 1e-30),
                "d_mlp": W.shape[0],
                "d_model": W.shape[1],
                "G": n_blocks(*W.shape),
                "narrow_width": narrow_width(*W.shape),
                "has_bias": b is not None,
            }
        )
    return pd.DataFrame(rows)


def _not_a_plain_site(target, reads) -> Update:
    raise TypeError(
        "MLP-carrier sites split h (or y) into blocks and need W_out: use "
        "tlgeo.decomposition.mlp_carrier.CarrierEdit, not tlgeo.hooks.edits.Edit / parallel_profile"
    )


_PRE = (("ref", "hook_resid_pre"),)
CARRIER_SITES: dict[str, Site] = {
    "h_vs_x": Site(
        "h_vs_x",
        "mlp.hook_post",
        (("ref", "hook_resid_mid"),),
        False,
        _not_a_plain_site,
        "MLP carrier h (mlp.hook_post) in d_model blocks vs the MLP's residual input x",
        parallel_block_reads=_PRE,
    ),
    "y_vs_h": Site(
        "y_vs_h",
        "hook_mlp_out",
        (("h", "mlp.hook_post"),),
        False,
        _not_a_plain_site,
        "per-block MLP output y_g = h_g @ W_out[I_g] vs its carrier block h_g",
    ),
}


def _carrier_site(name: str) -> str:
    if str(name) not in CARRIER_SITES:
        raise UnknownNameError(f"unknown MLP-carrier site {name!r}; known: {sorted(CARRIER_SITES)}")
    return str(name)


@dataclass(frozen=True)
class CarrierEdit:
    """Scale the parallel and perpendicular parts at an MLP-carrier site (see module doc).

    ``site``: ``"h_vs_x"`` or ``"y_vs_h"`` (the keys of :data:`CARRIER_SITES`; "h vs x" and "y_g vs h_g" are
    only the tables' labels);
    ``narrow``: ``"include"`` or ``"skip"`` the narrow last block. Like
    :class:`tlgeo.hooks.edits.Edit`: ``.hooks(model)`` for ``run_with_hooks``, ``.describe()``.
    """

    site: str
    s_par: Scale = 1.0
    s_perp: Scale = 1.0
    layers: int | tuple[int, ...] | None = None
    skip_first: int = SKIP_FIRST
    narrow: str = "include"

    def __post_init__(self) -> None:
        object.__setattr__(self, "site", _carrier_site(self.site))
        object.__setattr__(self, "s_par", check_scale(self.s_par, "s_par"))
        object.__setattr__(self, "s_perp", check_scale(self.s_perp, "s_perp"))
        _check_narrow(self.narrow)
        if self.layers is not None and not isinstance(self.layers, int):
            object.__setattr__(self, "layers", tuple(self.layers))

    @property
    def is_noop(self) -> bool:
        return is_unit(self.s_par) and is_unit(self.s_perp)

    def hooks(self, model: Model) -> HookList:
        """``(hook_name, fn)`` pairs for ``model``; validates the layers first."""
        resolve_layers(model.cfg, self.layers, self.skip_first)
        site = CARRIER_SITES[self.site]
        s_par, s_perp, narrow, noop = self.s_par, self.s_perp, self.narrow, self.is_noop

        if self.site == "h_vs_x":

            def on_target(layer: int, h: Tensor, reads: Mapping[str, Tensor]) -> Tensor:
                return h if noop else scale_carrier(h, reads["ref"], s_par, s_perp, narrow)

        else:
            weights = {l: mlp_out_weights(model, l)[0] for l in resolve_layers(model.cfg, self.layers, self.skip_first)}

            def on_target(layer: int, out: Tensor, reads: Mapping[str, Tensor]) -> Tensor:
                return out if noop else scale_output(out, reads["h"], weights[layer], s_par, s_perp, narrow)

        return site_hooks(model, site, on_target, self.layers, self.skip_first)

    def describe(self) -> dict:
        """Plain-value description (``heads`` is always ``"all"``, as in :meth:`Edit.describe`)."""
        return {
            "site": self.site,
            "s_par": self.s_par if not isinstance(self.s_par, Tensor) else "tensor",
            "s_perp": self.s_perp if not isinstance(self.s_perp, Tensor) else "tensor",
            "layers": "all" if self.layers is None else self.layers,
            "skip_first": self.skip_first,
            "heads": "all",
            "narrow": self.narrow,
        }


# ---------------------------------------------------------------- experiment

_LABELS = {"mlp": "residual mlp", "h_vs_x": "h vs x", "y_vs_h": "y_g vs h_g"}
_KEY = ("site", "s_par", "s_perp", "layers", "skip_first", "narrow", "context", "max_tokens", "n_chars", "inputs")


def mlp_carrier_table(
    model: Model,
    text: str,
    max_tokens: int | None = 2048,
    context: int = 512,
    *,
    skip_first: int = SKIP_FIRST,
    layers: Iterable[int] | None = None,
    narrow: Iterable[str] = NARROW,
    removals: Iterable[str] = REMOVALS,
    batch_size: int = 4,
    log_path: str | os.PathLike | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Table 10: mean-NLL change of No-Para (``s_par=0``) and No-Perp (``s_perp=0``) at the
    residual ``mlp`` site, ``h vs x`` and ``y_g vs h_g``, against the unedited model
    (``removals``: either or both).

    Every edit acts on the same blocks (``layers`` minus the first ``skip_first``).
    The carrier sites are measured once per ``narrow`` choice (``include`` / ``skip``
    the narrow last block); without a narrow block only ``include`` is run. Loss is
    :func:`tlgeo.evals.perplexity.perplexity` on the first ``max_tokens`` tokens of
    ``text`` in windows of ``context``. With ``log_path`` each row is written when
    measured and reused on a rerun with the same settings. ``progress``: a bar over the runs.

    Returns one row per run (the first is the baseline, ``site == "none"``):
    ``label, site, removal, narrow, s_par, s_perp, layers, skip_first, nll, ppl,
    n_tokens, n_windows, delta_loss, delta_ppl, seconds, G, narrow_width``.
    """
    narrow, layers, removals = _check_carrier_args(model, text, context, layers, skip_first, narrow, removals)
    cfg = model.cfg
    G, w = n_blocks(cfg.d_mlp, cfg.d_model), narrow_width(cfg.d_mlp, cfg.d_model)
    runs = _carrier_runs(layers, narrow, removals)
    hooks = [e.hooks(model) if e is not None else [] for *_, e in runs]  # validate up front

    log = (
        ResultLog(log_path, _KEY, identity=run_identity(model).row(), content=("inputs",))
        if log_path is not None
        else None
    )
    # the text and the token ids scored: another text, or the same read another way, is computed again
    inputs = content_digest(text, *scored_tokens(model, text, max_tokens))
    rows = []
    it = list(zip(runs, hooks))
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc="mlp carrier", unit="run")
    for (site, removal, n, e), hk in it:
        key = {
            "site": site,
            "s_par": 1.0 if e is None else e.s_par,
            "s_perp": 1.0 if e is None else e.s_perp,
            "layers": list(layers) if e else "none",
            "skip_first": skip_first,
            "narrow": n,
            "context": context,
            "max_tokens": max_tokens,
            "n_chars": len(text),
            "inputs": inputs,
        }
        row = log.get(**key) if log is not None else None
        if row is None:
            t0 = time.perf_counter()
            res = perplexity(model, text, context=context, max_tokens=max_tokens, batch_size=batch_size, fwd_hooks=hk)
            row = {**key, **res.to_dict(), "seconds": time.perf_counter() - t0}
            if log is not None:
                log.add(row)
        rows.append({**row, "label": _LABELS.get(site, "unedited"), "removal": removal})
    return _carrier_frame(rows, G, w)


def _check_carrier_args(
    model: Model, text, context: int, layers, skip_first: int, narrow: Iterable[str], removals: Iterable[str]
) -> tuple[list[str], list[int], list[str]]:
    """The table's ``narrow`` choices (``include`` only without a narrow block), blocks and removals, checked."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("empty corpus: no text to score")
    narrow = list(dict.fromkeys(narrow))
    if not narrow:
        raise InputError("narrow is empty: pass 'include' and/or 'skip'")
    for n in narrow:
        _check_narrow(n)
    cfg = model.cfg
    if context > cfg.n_ctx:
        raise InputError(f"context {context} exceeds the model's n_ctx {cfg.n_ctx}")
    layers = resolve_layers(cfg, layers, skip_first)  # validated; the same blocks for every site
    if narrow_width(cfg.d_mlp, cfg.d_model) is None:
        narrow = ["include"]
    removals = list(dict.fromkeys(removals))
    bad = [r for r in removals if r not in REMOVALS]
    if bad or not removals:
        raise InputError(f"removals: unknown {bad or 'none given'}; choose from {REMOVALS}")
    return narrow, layers, removals


def _carrier_runs(layers: list[int], narrow: list[str], removals: list[str]) -> list[tuple[str, str, str, object]]:
    """``(site, removal, narrow, edit)`` per run: the baseline (no edit) first, then each removal's sites."""
    runs: list[tuple[str, str, str, object]] = [("none", "none", "-", None)]
    for removal, sp, sq in (("no_para", 0.0, 1.0), ("no_perp", 1.0, 0.0)):
        if removal not in removals:
            continue
        runs.append(("mlp", removal, "-", Edit("mlp", sp, sq, layers=tuple(layers), skip_first=0)))
        for site in ("h_vs_x", "y_vs_h"):
            for n in narrow:
                runs.append((site, removal, n, CarrierEdit(site, sp, sq, tuple(layers), skip_first=0, narrow=n)))
    return runs


def _carrier_frame(rows: list[dict], G: int, w: int | None) -> pd.DataFrame:
    """The table: each run's change against the baseline (the first row), in the documented column order."""
    df = pd.DataFrame(rows)
    base = df.iloc[0]
    df["delta_loss"] = df["nll"] - base["nll"]
    df["delta_ppl"] = df["ppl"] - base["ppl"]
    df["G"], df["narrow_width"] = G, w
    df["layers"] = df["layers"].map(lambda v: _layer_range(v) if isinstance(v, list) else v)
    cols = [
        "label",
        "site",
        "removal",
        "narrow",
        "s_par",
        "s_perp",
        "layers",
        "skip_first",
        "nll",
        "ppl",
        "n_tokens",
        "n_windows",
        "delta_loss",
        "delta_ppl",
        "seconds",
        "G",
        "narrow_width",
    ]
    return df[cols]


def _layer_range(ls: list[int]) -> str:
    return f"{ls[0]}-{ls[-1]}" if ls == list(range(ls[0], ls[-1] + 1)) else ",".join(map(str, ls))


def carrier_table_wide(df: pd.DataFrame) -> pd.DataFrame:
    """Table-10 layout of :func:`mlp_carrier_table`: one row per (label, narrow), columns
    ``no_para`` and ``no_perp`` (mean-NLL change vs the unedited model)."""
    d = df[df["site"] != "none"]
    wide = d.pivot_table(index=["label", "narrow"], columns="removal", values="delta_loss", sort=False)
    return wide[["no_para", "no_perp"]]
