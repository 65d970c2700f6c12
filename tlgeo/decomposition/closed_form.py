"""Closed form of parallel edits on the attention diagonal (spec section 3, Table 5, Figure 4).

A value-space parallel edit with ``s_perp = 1`` adds ``(s_par - 1) alpha_t v_t`` to
the aggregate ``o_t = sum_s A_ts v_s`` of each head. Since ``v_t`` is the value
the query already reads with weight ``A_tt``, the same change is obtained by
moving the diagonal weight alone, **without renormalising the row**::

    Delta A_tt = (s_par - 1) <y_t, v_t> / max(||v_t||^2, eps)     (per head)

with ``y_t = o_t`` (full aggregate, ``value_full``) or ``y_t = c_t = o_t - A_tt v_t``
(exclude-self, ``value_excl_self``). ``eps`` is the clamp of the edit itself, so
the pattern edit reproduces ``hook_z`` (and hence everything downstream) up to
float rounding.

Residual-space attention (site ``attn``) edits ``hook_attn_out`` by
``(s_par - 1) alpha z`` with ``z = resid_pre``. One coefficient per token shared
by every head of the layer moves the output by ``Delta A_tt * W_O v_t`` (``W_O v_t``:
the output projection of the concatenated per-head values, bias excluded), so::

    Delta A_tt = (s_par - 1) <Delta_attn, z> / <W_O v_t, z>

matches the edit's component **along z** exactly, but the full vectors agree only
when ``W_O v_t`` is parallel to ``z`` (or ``s_par = 1``): the remainder is
``Delta A_tt * (W_O v_t)_perp``, reported by :func:`closed_form_check` as
``resid_local_rel_err``. On real models this is not small (see the README / the
task report): the residual "closed form" is a projection identity, not an
equivalence of edits.

Minimum-Frobenius operator form (:func:`min_frobenius_update`): if an update is
produced by a linear operator from an input, ``y = B m``, the smallest (Frobenius)
change of the operator that turns ``y`` into the edited ``y_hat`` is the rank-1::

    Delta B* = (y_hat - y) m^T / ||m||^2 = (s_par - 1) (y.r) / (||m||^2 ||r||^2) r m^T

where ``r`` is the reference of the decomposition, and ``m`` the operator's input
(e.g. the attention row ``A_t`` for ``B = V^T``, or the concatenated head outputs
for ``B = W_O``). Its norm is ``||y_hat - y|| / ||m||``, the least of every solution
of ``Delta B m = y_hat - y`` (rank-1 or not).

Layout: pure tensor functions (no model) <- :func:`closed_form_hooks` (a pattern
edit through :func:`tlgeo.hooks.adapter.site_hooks`) <- :func:`closed_form_check` (the
numerical proof on a model, tidy DataFrames) and the figures
(:func:`tlgeo.decomposition.plots.plot_diagonal`, :func:`tlgeo.decomposition.plots.attention_before_after`).

``s_par`` is checked once, where it enters: every public function takes a number, a tensor
or a :class:`ParallelScale` (checked when it was made, not again); :func:`closed_form_check`
and :func:`closed_form_hooks` make one and hand it down, so the hooks do not re-check it at
every layer of every forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence, Union

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..geometry.parallel import EPS, Scale, check_scale, compute_dtype
from ..geometry.value_space import expand_kv, self_weights
from ..hooks.adapter import HookList, resolve_layers, site_hooks
from ..hooks.edits import SKIP_FIRST, Edit
from ..hooks.sites import Site
from ..models import Model, input_device, read_weights
from .observe import check_tokens

__all__ = [
    "VARIANTS",
    "ParallelScale",
    "diag_delta",
    "value_diag_delta",
    "project_values",
    "residual_diag_delta",
    "add_to_diagonal",
    "min_frobenius_update",
    "closed_form_hooks",
    "ClosedFormResult",
    "closed_form_check",
    "diag_summary",
]

VARIANTS: tuple[str, ...] = ("value_full", "value_excl_self", "attn")


# ---------------------------------------------------------------------------
# Pure tensor functions
# ---------------------------------------------------------------------------


def _check_variant(variant: str) -> str:
    if variant not in VARIANTS:
        raise InputError(f"unknown closed-form variant {variant!r}; choose one of {list(VARIANTS)}")
    return variant


@dataclass(frozen=True)
class ParallelScale:
    """``s_par``, checked once when made: a finite number, or a tensor with finite entries."""

    value: Scale

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", check_scale(self.value, "s_par"))


SPar = Union[Scale, ParallelScale]  # what the public functions take as s_par


def _scale(s_par: SPar) -> ParallelScale:
    """``s_par`` as a :class:`ParallelScale`: one already made as it is, anything else checked now."""
    return s_par if isinstance(s_par, ParallelScale) else ParallelScale(s_par)


def _s_par(s_par: SPar) -> Scale:
    """The checked value of ``s_par`` (see :func:`_scale`)."""
    return _scale(s_par).value


def diag_delta(
    y: Float[Tensor, "... d"], v_self: Float[Tensor, "... d"], s_par: SPar, eps: float = EPS
) -> Float[Tensor, "..."]:
    """``(s_par - 1) <y, v_self> / max(||v_self||^2, eps)`` in float32/64.

    Adding this to ``A_tt`` adds ``(s_par - 1) alpha v_self`` to the aggregate:
    the parallel edit of ``y`` relative to ``v_self`` (``s_perp = 1``).
    """
    s_par = _s_par(s_par)
    dt = compute_dtype(y, v_self)
    y, v = y.to(dt), v_self.to(dt)
    if isinstance(s_par, Tensor):
        s_par = s_par.to(dt)
    return (s_par - 1.0) * (y * v).sum(-1) / (v * v).sum(-1).clamp_min(eps)


def _self_values(v: Tensor, q: int, n_heads: int) -> Tensor:
    """``[batch, q, head, d]``: each query's own value, expanded for GQA."""
    return expand_kv(v[:, v.shape[1] - q :], n_heads)


def value_diag_delta(
    pattern: Float[Tensor, "batch head q k"],
    v: Float[Tensor, "batch k kv d_head"],
    s_par: SPar,
    exclude_self: bool = False,
    eps: float = EPS,
) -> Float[Tensor, "batch q head"]:
    """``Delta A_tt`` of the value-space parallel edit, per query and head.

    ``o_t = sum_s A_ts v_s`` is recomputed from ``pattern`` and ``v`` (equal to
    ``hook_z``); with ``exclude_self`` the update is ``c_t = o_t - A_tt v_t``.
    """
    if pattern.ndim != 4 or v.ndim != 4:
        raise InputError(
            f"pattern must be [batch, head, q, k] and v [batch, k, kv, d], got "
            f"{tuple(pattern.shape)} and {tuple(v.shape)}"
        )
    n_heads, q = pattern.shape[1], pattern.shape[-2]
    dt = compute_dtype(pattern, v)
    p, vv = pattern.to(dt), v.to(dt)
    o = torch.einsum("bhqk,bkhd->bqhd", p, expand_kv(vv, n_heads))
    v_self = _self_values(vv, q, n_heads)
    if exclude_self:
        o = o - self_weights(p).unsqueeze(-1) * v_self
    return diag_delta(o, v_self, s_par, eps)  # s_par is checked there, once


def project_values(
    v_self: Float[Tensor, "batch q head d_head"], W_O: Float[Tensor, "head d_head d_model"]
) -> Float[Tensor, "batch q d_model"]:
    """``W_O v_t``: the output projection of the concatenated per-head values (no bias)."""
    dt = compute_dtype(v_self, W_O)
    return torch.einsum("bqhd,hdm->bqm", v_self.to(dt), W_O.to(dt))


def residual_diag_delta(
    attn_out: Float[Tensor, "batch q d_model"],
    z: Float[Tensor, "batch q d_model"],
    wo_v: Float[Tensor, "batch q d_model"],
    s_par: SPar,
    eps: float = EPS,
) -> Float[Tensor, "batch q"]:
    """``(s_par - 1) <attn_out, z> / <W_O v_t, z>``: one ``Delta A_tt`` per token for all heads.

    Matches the residual edit's component along ``z`` (exactly the edit only when
    ``W_O v_t`` is parallel to ``z``). The denominator's magnitude is clamped at
    ``eps`` with its sign kept (a zero denominator counts as positive).
    """
    s_par = _s_par(s_par)
    dt = compute_dtype(attn_out, z, wo_v)
    a, zz, w = attn_out.to(dt), z.to(dt), wo_v.to(dt)
    num = (a * zz).sum(-1)
    den = (w * zz).sum(-1)
    sign = torch.where(den < 0, -1.0, 1.0).to(dt)
    return (s_par - 1.0) * num / (sign * den.abs().clamp_min(eps))


def add_to_diagonal(
    pattern: Float[Tensor, "batch head q k"],
    delta: Float[Tensor, "batch q head"] | Float[Tensor, "batch q"],
) -> Float[Tensor, "batch head q k"]:
    """``pattern`` with ``delta`` added to each query's own key (``A_tt``), rows NOT renormalised.

    ``delta`` is per head ``[batch, q, head]`` or shared by the heads ``[batch, q]``.
    With a KV cache query ``i`` sits at key ``i + k - q``. Cast back to the pattern's dtype.
    """
    b, h, q, k = pattern.shape
    if delta.ndim == 2:
        delta = delta.unsqueeze(-1).expand(b, q, h)
    if tuple(delta.shape) != (b, q, h):
        raise InputError(f"delta must be [batch, q, head] = {(b, q, h)} or [batch, q], got {tuple(delta.shape)}")
    dt = compute_dtype(pattern, delta)
    eye = (
        torch.arange(k, device=pattern.device)[None, :] == (torch.arange(q, device=pattern.device) + (k - q))[:, None]
    )  # [q, k]
    add = delta.to(dt).transpose(1, 2).unsqueeze(-1) * eye.to(dt)  # [b, h, q, k]
    return (pattern.to(dt) + add).to(pattern.dtype)


def min_frobenius_update(
    y: Float[Tensor, "... d_y"],
    r: Float[Tensor, "... d_y"],
    m: Float[Tensor, "... d_m"],
    s_par: SPar,
    eps: float = EPS,
) -> Float[Tensor, "... d_y d_m"]:
    """``Delta B* = (s_par - 1) (y.r) / (||m||^2 ||r||^2) r m^T`` (squared norms clamped at ``eps``).

    ``y = B m`` is an update produced by a linear operator ``B`` from its input
    ``m``; ``r`` is the reference. ``Delta B* m`` is the parallel edit's change
    ``(s_par - 1) alpha r``, and ``Delta B*`` has the least Frobenius norm of all
    ``Delta B`` with that property.
    """
    s_par = _s_par(s_par)
    dt = compute_dtype(y, r, m)
    y, r, m = y.to(dt), r.to(dt), m.to(dt)
    if isinstance(s_par, Tensor):
        s_par = s_par.to(dt)
    coef = (s_par - 1.0) * (y * r).sum(-1) / ((m * m).sum(-1).clamp_min(eps) * (r * r).sum(-1).clamp_min(eps))
    return coef[..., None, None] * r.unsqueeze(-1) * m.unsqueeze(-2)


# ---------------------------------------------------------------------------
# Hook adapter: the closed form as a pattern edit
# ---------------------------------------------------------------------------

_CF_SITES = {
    "value_full": Site(
        "closed_form_value_full",
        "attn.hook_pattern",
        (("v", "attn.hook_v"),),
        True,
        None,
        "closed form of value_full: Delta A_tt on the diagonal",
    ),
    "value_excl_self": Site(
        "closed_form_value_excl_self",
        "attn.hook_pattern",
        (("v", "attn.hook_v"),),
        True,
        None,
        "closed form of value_excl_self: Delta A_tt on the diagonal",
    ),
    "attn": Site(
        "closed_form_attn",
        "attn.hook_pattern",
        (("ref", "hook_resid_pre"), ("v", "attn.hook_v")),
        True,
        None,
        "closed form of residual attention: one Delta A_tt per token for all heads",
    ),
}


def _attn_params(model: Model, layer: int) -> tuple[Tensor, Tensor | None]:
    return read_weights(model.blocks[layer].attn, "W_O", "b_O")  # read from the offload where a block is


def closed_form_hooks(
    model: Model,
    variant: str,
    s_par: SPar,
    *,
    layers: int | Iterable[int] | None = None,
    skip_first: int = SKIP_FIRST,
    record: list | None = None,
    eps: float = EPS,
) -> HookList:
    """Hooks on ``attn.hook_pattern`` that add the closed-form ``Delta A_tt`` (no renormalisation).

    ``Delta A_tt`` is computed inside the forward from the pattern and ``hook_v``
    (and, for ``attn``, ``hook_resid_pre`` and ``W_O``), so with all layers edited
    each layer sees the edited upstream state, as the value edit does. With
    ``record`` (a list), each chosen layer appends a dict of CPU float32 tensors:
    ``layer``, ``a_self`` and ``delta`` ``[batch, q, head]``, and for ``attn``
    ``local_rel_err`` ``[batch, q]`` = ``||Delta A W_O v_t - (s_par-1) alpha z|| / ||attn_out||``
    and ``local_par_rel_err``, the component of that difference along ``z`` over ``||attn_out||``.
    """
    _check_variant(variant)
    scale = _scale(s_par)  # s_par checked once, here
    s_par = scale.value
    n_heads = model.cfg.n_heads

    def on_pattern(layer: int, pattern: Tensor, reads: Mapping[str, Tensor]) -> Tensor:
        v = reads["v"]
        info: dict = {"layer": layer}
        if variant == "attn":
            W_O, b_O = _attn_params(model, layer)
            z = reads["ref"]
            q = pattern.shape[-2]
            dt = torch.float32 if pattern.dtype != torch.float64 else torch.float64
            p, vv = pattern.to(dt), v.to(dt)
            o = torch.einsum("bhqk,bkhd->bqhd", p, expand_kv(vv, n_heads))
            attn_out = project_values(o, W_O)
            if b_O is not None:
                attn_out = attn_out + b_O.to(attn_out.dtype)
            wo_v = project_values(_self_values(vv, q, n_heads), W_O)
            zq = z[:, z.shape[1] - q :].to(attn_out.dtype)
            delta_tok = residual_diag_delta(attn_out, zq, wo_v, scale, eps)  # [b, q]
            delta = delta_tok.unsqueeze(-1).expand(-1, -1, n_heads)
            if record is not None:
                alpha = (attn_out * zq).sum(-1) / (zq * zq).sum(-1).clamp_min(eps)
                target = (s_par - 1.0) * alpha.unsqueeze(-1) * zq
                diff = delta_tok.unsqueeze(-1) * wo_v - target
                size = attn_out.norm(dim=-1).clamp_min(eps)
                info["local_rel_err"] = (diff.norm(dim=-1) / size).float().cpu()
                along_z = (diff * zq).sum(-1) / zq.norm(dim=-1).clamp_min(eps)
                info["local_par_rel_err"] = (along_z.abs() / size).float().cpu()
        else:
            delta = value_diag_delta(pattern, v, scale, variant == "value_excl_self", eps)
        if record is not None:
            info["a_self"] = self_weights(pattern).float().cpu()
            info["delta"] = delta.float().cpu()
            record.append(info)
        return add_to_diagonal(pattern, delta)

    return site_hooks(model, _CF_SITES[variant], on_pattern, layers, skip_first)


# ---------------------------------------------------------------------------
# Experiment: the closed form reproduces the edit
# ---------------------------------------------------------------------------


@dataclass
class ClosedFormResult:
    """``diag``: per variant, layer, head, seq, pos: ``a_self`` (A_tt), ``delta_a``,
    ``a_self_new`` (A_tt + Delta A_tt); ``attn`` only (else NaN): ``resid_local_rel_err``
    ``||Delta A W_O v_t - (s_par-1) alpha z|| / ||attn_out||`` (pattern edit vs residual edit
    within the same forward) and ``resid_local_par_rel_err``, the same difference's
    component along ``z`` (0 up to rounding, unless the denominator was clamped).
    ``errors``: per variant, quantity (``z``, ``attn_out``, ``logits``) and layer
    (-1 for logits): ``max_abs_err`` of the closed-form run against the edit run,
    ``ref_max_abs`` (the edit run's largest entry, for scale), ``rel_err`` (largest
    ``||diff||`` over vectors / RMS of the reference's vector norms: stable) and
    ``max_rel_err`` (max over vectors of ``||diff|| / ||reference||``: blows up where an
    edited vector is near 0, e.g. ``value_full`` at ``s_par = 0`` leaves only ``o_perp``)."""

    diag: pd.DataFrame
    errors: pd.DataFrame

    def summary(self) -> pd.DataFrame:
        """Largest error per variant and quantity, over layers (:func:`error_summary`)."""
        return error_summary(self.errors)


def error_summary(errors: pd.DataFrame) -> pd.DataFrame:
    """Largest error per variant and quantity of a closed-form check's ``errors`` table, over layers."""
    return (
        errors.groupby(["variant", "quantity"], sort=False)[["max_abs_err", "rel_err", "max_rel_err", "ref_max_abs"]]
        .max()
        .reset_index()
    )


def _capture_hooks(layers: Sequence[int], store: dict) -> HookList:
    hooks: HookList = []
    for layer in layers:
        for key, name in (("z", f"blocks.{layer}.attn.hook_z"), ("attn_out", f"blocks.{layer}.hook_attn_out")):

            def cap(t: Tensor, hook, _k=(key, layer)) -> None:
                store[_k] = t.detach().float().cpu()

            hooks.append((name, cap))
    return hooks


def _err_row(variant: str, quantity: str, layer: int, got: Tensor, ref: Tensor) -> dict:
    diff = got.double() - ref.double()
    ref_norm = ref.double().norm(dim=-1)
    diff_norm = diff.norm(dim=-1)
    rms = ref_norm.pow(2).mean().sqrt().clamp_min(1e-12)
    return {
        "variant": variant,
        "quantity": quantity,
        "layer": layer,
        "max_abs_err": float(diff.abs().max()),
        "ref_max_abs": float(ref.abs().max()),
        "rel_err": float(diff_norm.max() / rms),
        "max_rel_err": float((diff_norm / ref_norm.clamp_min(1e-12)).max()),
    }


def _diag_frame(variant: str, records: list) -> pd.DataFrame:
    frames = []
    for rec in records:
        a, d = rec["a_self"], rec["delta"]  # [b, q, h]
        b, q, h = a.shape
        idx = torch.stack(torch.meshgrid(torch.arange(b), torch.arange(q), torch.arange(h), indexing="ij"))
        cols = {
            "variant": variant,
            "layer": rec["layer"],
            "head": idx[2].reshape(-1).numpy(),
            "seq": idx[0].reshape(-1).numpy(),
            "pos": idx[1].reshape(-1).numpy(),
            "a_self": a.reshape(-1).numpy(),
            "delta_a": d.reshape(-1).numpy(),
            "a_self_new": (a + d).reshape(-1).numpy(),
        }
        for key in ("local_rel_err", "local_par_rel_err"):
            col = "resid_" + key
            if key in rec:
                cols[col] = rec[key].unsqueeze(-1).expand(b, q, h).reshape(-1).numpy()
            else:
                cols[col] = float("nan")
        frames.append(pd.DataFrame(cols))
    return pd.concat(frames, ignore_index=True)


def closed_form_check(
    model: Model,
    tokens: Int[Tensor, "batch pos"],
    s_par: float | ParallelScale = 0.0,
    *,
    variants: Iterable[str] = VARIANTS,
    layers: int | Iterable[int] | None = None,
    skip_first: int = SKIP_FIRST,
    eps: float = EPS,
    progress: bool = False,
) -> ClosedFormResult:
    """Run each variant twice, as the site's ``Edit(s_par)`` and as the closed-form pattern
    edit, and compare ``hook_z``, ``hook_attn_out`` (every chosen layer) and the logits.

    For ``value_full`` / ``value_excl_self`` the errors are float rounding; for
    ``attn`` they measure how far the shared-coefficient pattern edit is from the
    residual edit (see the module docstring). Two forwards per variant; only
    ``z`` and ``attn_out`` of the chosen layers are kept. ``progress``: a bar over the variants.
    """
    tokens = check_tokens(model, tokens)
    variants = [_check_variant(v) for v in variants]
    if not variants:
        raise InputError("no variants given: choose from " + str(list(VARIANTS)))
    scale = _scale(s_par)  # s_par checked once, here
    chosen = resolve_layers(model.cfg, layers, skip_first)
    device = input_device(model)
    tokens = tokens.to(device)
    diag_frames, err_rows = [], []
    it = variants
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(variants, desc="closed form", unit="variant")
    for variant in it:
        ref_store: dict = {}
        cf_store: dict = {}
        records: list = []
        edit_hooks = Edit(variant, s_par=scale.value, layers=tuple(chosen), skip_first=0).hooks(model)
        cf_hooks = closed_form_hooks(model, variant, scale, layers=chosen, skip_first=0, record=records, eps=eps)
        with torch.inference_mode():
            ref_logits = model.run_with_hooks(tokens, fwd_hooks=edit_hooks + _capture_hooks(chosen, ref_store))
            cf_logits = model.run_with_hooks(tokens, fwd_hooks=cf_hooks + _capture_hooks(chosen, cf_store))
        for layer in chosen:
            for quantity in ("z", "attn_out"):
                err_rows.append(
                    _err_row(variant, quantity, layer, cf_store[(quantity, layer)], ref_store[(quantity, layer)])
                )
        err_rows.append(_err_row(variant, "logits", -1, cf_logits.float().cpu(), ref_logits.float().cpu()))
        diag_frames.append(_diag_frame(variant, records))
    return ClosedFormResult(pd.concat(diag_frames, ignore_index=True), pd.DataFrame(err_rows))


def diag_summary(diag: pd.DataFrame, skip_first_pos: bool = True) -> pd.DataFrame:
    """Per variant: mean ``A_tt`` before/after, mean/min/max ``Delta A_tt``, share of negative
    edited diagonals, and (``attn``) mean/max ``resid_local_rel_err``. Position 0 left out
    unless ``skip_first_pos=False`` (it sees only itself, ``A_00 = 1``)."""
    if diag.empty:
        raise InputError("empty diagonal table")
    d = diag[diag["pos"] > 0] if skip_first_pos else diag
    g = d.groupby("variant", sort=False)
    out = pd.DataFrame(
        {
            "a_self_mean": g["a_self"].mean(),
            "a_self_new_mean": g["a_self_new"].mean(),
            "delta_a_mean": g["delta_a"].mean(),
            "delta_a_min": g["delta_a"].min(),
            "delta_a_max": g["delta_a"].max(),
            "a_self_new_min": g["a_self_new"].min(),
            "a_self_new_max": g["a_self_new"].max(),
            "share_negative": g["a_self_new"].apply(lambda s: float((s < 0).mean())),
            "resid_local_rel_err_mean": g["resid_local_rel_err"].mean(),
            "resid_local_rel_err_max": g["resid_local_rel_err"].max(),
            "resid_local_rel_err_median": g["resid_local_rel_err"].median(),
            "resid_local_par_rel_err_max": g["resid_local_par_rel_err"].max(),
            "n": g.size(),
        }
    )
    return out.reset_index()
