"""Pure decomposition of compression errors; no models.

For a layer update ``Delta_base`` (dense model) and ``Delta_comp`` (compressed
layer, same input) the error ``e = Delta_comp - Delta_base`` is split with
:func:`tlgeo.geometry.split_parallel` relative to ``Delta_base`` (or, in the
reference-``z`` variant, relative to the hidden state ``z`` the update is added
to). Norms are reported relative to ``||Delta_base||``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from ..errors import InputError
from ..geometry.parallel import split_parallel

__all__ = [
    "ERROR_COLUMNS",
    "error_energies",
    "prompt_ratios",
    "summarize_layers",
    "across_layer_stats",
    "perp_wanda_score",
    "mixed_error_energy",
]

# Per-prompt columns: ratios to ||Delta_base|| (e, e_par, e_perp; *_z relative to z) and shares of ||e||.
ERROR_COLUMNS = ("e", "e_par", "e_perp", "e_par_z", "e_perp_z", "share_perp", "share_par")


def error_energies(
    delta_base: Float[Tensor, "... d"],
    delta_comp: Float[Tensor, "... d"],
    z: Float[Tensor, "... d"] | None = None,
) -> dict[str, Float[Tensor, "..."]]:
    """Squared norms per vector of ``Delta_base``, ``e`` and its parts.

    Keys: ``base``, ``e``, ``e_par``, ``e_perp`` (relative to ``Delta_base``) and, when
    ``z`` is given, ``e_par_z``, ``e_perp_z`` (relative to ``z``). float32 or float64.
    """
    if delta_base.shape != delta_comp.shape:
        raise InputError(
            f"Delta_base {tuple(delta_base.shape)} and Delta_comp {tuple(delta_comp.shape)} differ in shape"
        )
    dt = torch.float64 if delta_base.dtype == torch.float64 else torch.float32
    b, c = delta_base.to(dt), delta_comp.to(delta_base.device, dt)  # on the dense model's device
    e = c - b
    s = split_parallel(e, b)
    out = {
        "base": b.pow(2).sum(-1),
        "e": e.pow(2).sum(-1),
        "e_par": s.par.pow(2).sum(-1),
        "e_perp": s.perp.pow(2).sum(-1),
    }
    if z is not None:
        sz = split_parallel(e, z.to(dt))
        out["e_par_z"] = sz.par.pow(2).sum(-1)
        out["e_perp_z"] = sz.perp.pow(2).sum(-1)
    return out


def prompt_ratios(energies: dict[str, Float[Tensor, "b t"]], first: int = 1) -> dict[str, dict[str, np.ndarray]]:
    """Per prompt, the norms relative to ``||Delta_base||`` for the ``last`` token and over
    ``all`` tokens from position ``first`` on (root of summed energies, i.e. Frobenius over
    tokens; position 0 -- BOS, the attention sink -- is left out by default).

    Returns ``{"last": {col: [b]}, "all": {col: [b]}}`` with the columns of :data:`ERROR_COLUMNS`
    that the energies allow.
    """
    out = {}
    for tokens, sl in (("last", slice(-1, None)), ("all", slice(first, None))):
        tot = {k: v[:, sl].double().sum(-1) for k, v in energies.items()}
        base = tot["base"].clamp_min(1e-30).sqrt()
        e = tot["e"].sqrt()
        cols = {k: (tot[k].sqrt() / base).numpy() for k in ("e", "e_par", "e_perp", "e_par_z", "e_perp_z") if k in tot}
        cols["share_perp"] = (tot["e_perp"].sqrt() / e.clamp_min(1e-30)).numpy()
        cols["share_par"] = (tot["e_par"].sqrt() / e.clamp_min(1e-30)).numpy()
        out[tokens] = cols
    return out


def summarize_layers(prompts: pd.DataFrame) -> pd.DataFrame:
    """Mean and SD over prompts of every error column, per (method, mode, site, tokens, layer)."""
    keys = [k for k in ("method", "mode", "site", "tokens", "layer") if k in prompts.columns]
    cols = [c for c in ERROR_COLUMNS if c in prompts.columns]
    g = prompts.groupby(keys, sort=True)[cols]
    mean, sd = g.mean(), g.std(ddof=1)
    out = mean.join(sd, lsuffix="_mean", rsuffix="_sd").reset_index()
    out["n_prompts"] = g.size().values
    return out


def _pearson(x: np.ndarray, y: np.ndarray) -> float:
    from scipy import stats

    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(stats.pearsonr(x, y)[0])


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    from scipy import stats

    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(stats.spearmanr(x, y)[0])


def across_layer_stats(layers: pd.DataFrame, ref: str = "delta") -> pd.DataFrame:
    """The paper's Table 12 from a :func:`summarize_layers` frame.

    Per (method, mode, site, tokens), over layers of the per-layer means: Pearson
    ``r(e, e_perp)``, Spearman ``rho(e, e_perp)`` and ``rho(e, e_par)``, and the mean over
    layers of the perpendicular and parallel shares ``||e_perp|| / ||e||``, ``||e_par|| / ||e||``
    (with ``ref="z"`` the parts are relative to ``z``; shares are then
    ``e_perp_z / e``). Also the mean over layers of ``||e_perp|| / ||Delta_base||`` and ``||e||/||Delta_base||``.
    """
    par, perp = ("e_par", "e_perp") if ref == "delta" else ("e_par_z", "e_perp_z")
    keys = [k for k in ("method", "mode", "site", "tokens") if k in layers.columns]
    rows = []
    for key, g in layers.groupby(keys, sort=True):
        g = g.sort_values("layer")
        e, ep, ea = (g[f"{c}_mean"].to_numpy(float) for c in ("e", perp, par))
        if ref == "delta":
            sp, sa = g["share_perp_mean"].to_numpy(float), g["share_par_mean"].to_numpy(float)
        else:
            sp, sa = ep / np.maximum(e, 1e-30), ea / np.maximum(e, 1e-30)
        rows.append(
            {
                **dict(zip(keys, key if isinstance(key, tuple) else (key,))),
                "ref": ref,
                "r_e_perp": _pearson(e, ep),
                "rho_e_perp": _spearman(e, ep),
                "rho_e_par": _spearman(e, ea),
                "share_perp": float(np.mean(sp)),
                "share_par": float(np.mean(sa)),
                "mean_e": float(np.mean(e)),
                "mean_e_perp": float(np.mean(ep)),
                "mean_e_par": float(np.mean(ea)),
                "n_layers": len(g),
            }
        )
    return pd.DataFrame(rows)


def perp_wanda_score(
    W: Float[Tensor, "out inp"],
    sq_norms: Float[Tensor, "inp"],
    uu_xx: Float[Tensor, "out inp"] | None = None,
    perp_lambda: float = 0.0,
) -> Float[Tensor, "out inp"]:
    """Pruning score ``|W_ij| sqrt(sum_t x_tj^2 (1 - (1 - lambda) u_ti^2))``.

    ``sq_norms[j] = sum_t x_tj^2`` (Wanda's row scalars), ``uu_xx[i, j] = sum_t u_ti^2 x_tj^2``
    with ``u_t`` the unit direction of the dense output of token ``t``. Without
    ``uu_xx`` (a layer whose output is not a residual update) or with ``lambda = 1``
    this is Wanda's ``|W_ij| ||X_j||``.
    """
    if not 0.0 <= perp_lambda <= 1.0:
        raise InputError(f"perp_lambda must be in [0, 1], got {perp_lambda}")
    energy = sq_norms.reshape(1, -1).to(W.dtype)
    if uu_xx is not None:
        energy = energy - (1.0 - perp_lambda) * uu_xx.to(W.dtype)
    return W.abs() * energy.clamp_min(0).sqrt()


def mixed_error_energy(
    ref: Float[Tensor, "... d"],
    out: Float[Tensor, "... d"],
    lam: float = 0.0,
) -> tuple[Tensor, int]:
    """Summed ``||e_perp||^2 + lam ||e_par||^2`` of ``e = out - ref`` split relative to ``ref``
    (per vector), and the number of elements of ``ref`` (for a mean like ``mse_loss``'s).

    ``lam = 1`` is the squared L2 error; ``lam = 0`` only the perpendicular part
    (``lam > 1`` weights the parallel part more: a control). A
    zero-norm reference has no direction: its whole error counts as perpendicular.
    Computed in float32 (float64 for float64 inputs).
    """
    if not 0.0 <= lam < float("inf"):
        raise InputError(f"lam must be finite and >= 0, got {lam}")
    if ref.shape != out.shape:
        raise InputError(f"reference {tuple(ref.shape)} and output {tuple(out.shape)} differ in shape")
    dt = torch.float64 if torch.float64 in (ref.dtype, out.dtype) else torch.float32
    r, e = ref.to(dt), out.to(dt) - ref.to(dt)
    n2 = r.pow(2).sum(-1)
    par2 = torch.where(n2 > 0, (e * r).sum(-1).pow(2) / n2.clamp_min(torch.finfo(dt).tiny), torch.zeros_like(n2))
    return (e.pow(2).sum(-1) - (1.0 - lam) * par2).sum(), ref.numel()
