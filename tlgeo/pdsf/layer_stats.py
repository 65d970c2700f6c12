"""PDSF geometry of a prompt set at every layer: ranks, energies, participation ratios, the angle of
the prediction direction to the principal axes, readout alignment, manifold complexity and group
discrimination of each part.

:func:`pdsf_geometry` takes the last-token states of the prompts
(:class:`tlgeo.pdsf.states.PromptStates`) and their prediction directions, fits D and S per
layer over the prompt set (:func:`tlgeo.geometry.subspaces.fit_pdsf`) and returns two tidy
tables: one row per layer, one row per (layer, part). Coordinates of each part: P its
coefficient ``h·u``; D and S in their bases; F in its top ``f_axes`` principal axes (the
authors: 50, at most ``n - 1``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float
from torch import Tensor

from ..errors import InputError
from ..geometry.manifold import curvature_ratio, local_global_pr, twonn_dimension
from ..geometry.subspaces import (
    PARTS,
    axis_angles,
    energy_shares,
    fit_pdsf,
    pca_basis,
    split_pdsf,
    subspace_participation,
)
from ..stats.discrimination import cosine_gap_test, group_angles, silhouette
from .states import PromptStates

__all__ = ["PDSFGeometry", "pdsf_geometry", "part_coordinates", "logit_gram"]


@dataclass
class PDSFGeometry:
    """``layers``: one row per layer (with ``group_angle_D``: the mean principal angle between the prompt
    groups' own D subspaces); ``parts``: one row per (layer, part)."""

    layers: pd.DataFrame
    parts: pd.DataFrame


def part_coordinates(
    parts: dict[str, Float[Tensor, "n d"]], u: Float[Tensor, "n d"], basis, f_axes: int = 50
) -> dict[str, Float[Tensor, "n k"]]:
    """Each part's coordinates ``[n, k]``: P as ``h·u``, D and S in their bases, F in its top
    principal axes (``min(f_axes, n - 1)``)."""
    n = parts["P"].shape[0]
    f_basis, _ = pca_basis(parts["F"], min(f_axes, n - 1, parts["F"].shape[1]), center=True)
    return {
        "P": (parts["P"] * u.to(parts["P"].dtype)).sum(-1, keepdim=True),
        "D": parts["D"] @ basis.D.to(parts["D"].dtype),
        "S": parts["S"] @ basis.S.to(parts["S"].dtype),
        "F": parts["F"] @ f_basis,
    }


def _checked_layers(ps: PromptStates, u: Tensor, groups: Sequence[str], layers: Iterable[int] | None) -> list[int]:
    """The state indices to fit (default every state); raise on mismatched groups or directions, or a bad layer."""
    n = ps.states.shape[1]
    if len(groups) != n:
        raise InputError(f"{len(groups)} group labels for {n} prompts")
    if u.shape != ps.states.shape[1:] and u.shape != ps.states.shape:
        raise InputError(
            f"prediction directions must be [{n}, {ps.states.shape[2]}] (or one set per state, "
            f"{tuple(ps.states.shape)}), got {tuple(u.shape)}"
        )
    layers = list(range(ps.states.shape[0])) if layers is None else list(layers)
    bad = [l for l in layers if not 0 <= l < ps.states.shape[0]]
    if bad:
        raise InputError(f"layers {bad} out of range: the states are 0..{ps.states.shape[0] - 1}")
    return layers


def _layer_fit(l: int, h: Tensor, u64: Tensor, f_axes: int, **fit_kw) -> tuple[dict, dict, dict, dict]:
    """``(the layer's row, its parts' coordinates, its parts, each part's mean energy and PR)`` of float64 states
    ``h [n, d]`` with directions ``u64`` (``fit_kw``: :func:`fit_pdsf`'s ``k_D, k_S, center, mode``)."""
    basis = fit_pdsf(h, u64, **fit_kw)
    parts = split_pdsf(h, u64, basis)
    energy = energy_shares(parts)
    coords = part_coordinates(parts, u64, basis, f_axes)
    axes, _ = pca_basis(h, basis.k_D, center=True)
    ang = axis_angles(u64, axes)
    scale = float((h * h).sum(-1).mean())  # the states' mean energy: below 1e-12 of it, a part has none
    pr = {p: subspace_participation(coords[p], scale=scale) for p in PARTS}
    row = {
        "layer": l,
        "k_D": basis.k_D,
        "k_S": basis.k_S,
        "pr_D": pr["D"],
        "pr_S": pr["S"],
        "pr_F": pr["F"],
        "interface_dim": 1 + pr["D"] + pr["S"],
        "angle_u_top_axis": float(ang[:, 0].mean()),
        "angle_u_nearest_axis": float(ang.min(1).values.mean()),
        **{f"energy_{p}": float(energy[p].mean()) for p in PARTS},
    }
    stats = {p: {"energy": float(energy[p].mean()), "pr": pr[p]} for p in PARTS}
    return row, coords, parts, stats


def _part_row(
    l: int,
    p: str,
    x: Tensor,
    stats: dict,
    readout: dict,
    labels: np.ndarray | None,
    *,
    complexity: bool,
    knn_k: int,
    **test_kw,
) -> dict:
    """The row of part ``p`` (coordinates ``x [n, k]``) at layer ``l``: its energy and PR (``stats``), readout, its
    manifold complexity (with ``complexity``) and, given group ``labels`` (of several groups), its group
    discrimination (``test_kw``: ``n_shuffles, seed``)."""
    prow = {"layer": l, "part": p, "dim": int(x.shape[1]), **stats, **readout.get(p, {})}
    if complexity:
        local, glob = local_global_pr(x, k=knn_k) if x.shape[1] > 1 else (1.0, 1.0)
        prow.update(
            curvature_ratio=curvature_ratio(x, k=knn_k),
            local_pr=local,
            global_pr=glob,
            twonn=twonn_dimension(x) if x.shape[1] > 1 else 1.0,
        )
    if labels is not None:
        t = cosine_gap_test(x.numpy(), labels, center=False, **test_kw)
        prow.update(
            silhouette=silhouette(x.numpy(), labels, "cosine" if x.shape[1] > 1 else "euclidean"),
            cosine_gap=t.gap,
            gap_cohens_d=t.cohens_d,
            gap_p=t.p_value,
        )
    return prow


def pdsf_geometry(
    ps: PromptStates,
    u: Float[Tensor, "n d"] | Float[Tensor, "states n d"],
    groups: Sequence[str],
    *,
    w_u: Float[Tensor, "d vocab"] | None = None,
    norm_scale: Float[Tensor, "d"] | None = None,
    layers: Iterable[int] | None = None,
    k_D: int | None = None,
    k_S: int | None = None,
    mode: str = "exact",
    center: bool = True,
    knn_k: int = 8,
    f_axes: int = 50,
    n_shuffles: int = 20,
    seed: int = 0,
    complexity: bool = True,
) -> PDSFGeometry:
    """PDSF geometry at ``layers`` (default: every state 0..L); ``u`` one direction per prompt, or one
    per prompt and state (the logit lens: ``[L + 1, n, d]``). ``w_u [d, vocab]`` (and the final
    norm's ``norm_scale``) add the readout alignment: the cosine of each part's logit vector
    ``W_Uᵀ(g ⊙ part)`` with the whole state's, and each part's share of the predicted token's logit."""
    layers = _checked_layers(ps, u, groups, layers)
    labels = np.asarray(groups)
    tested = labels if len(set(groups)) > 1 else None  # group discrimination needs several groups
    g = None if norm_scale is None else norm_scale.double()
    gram = logit_gram(w_u) if w_u is not None else None
    layer_rows, part_rows = [], []
    for l in layers:
        h = ps.states[l].double()
        u64 = (u[l] if u.ndim == 3 else u).double()
        row, coords, parts, stats = _layer_fit(l, h, u64, f_axes, k_D=k_D, k_S=k_S, center=center, mode=mode)
        tokens = ps.lens[l] if u.ndim == 3 else ps.predicted
        readout = _readout(parts, h, gram, w_u, g, tokens) if w_u is not None else {}
        row["group_angle_D"] = _mean_group_angle(coords["D"].numpy(), labels)
        layer_rows.append(row)
        for p in PARTS:
            part_rows.append(
                _part_row(
                    l,
                    p,
                    coords[p],
                    stats[p],
                    readout,
                    tested,
                    complexity=complexity,
                    knn_k=knn_k,
                    n_shuffles=n_shuffles,
                    seed=seed,
                )
            )
    return PDSFGeometry(pd.DataFrame(layer_rows), pd.DataFrame(part_rows))


def _mean_group_angle(x: np.ndarray, labels: np.ndarray, k: int = 2) -> float:
    """Mean principal angle (degrees) between the top-``k`` PCA subspaces of the groups' D coordinates,
    over all pairs of groups (NaN when groups are too small)."""
    names = np.unique(labels)
    k = min(k, x.shape[1])
    sets = [x[labels == g] for g in names]
    if len(sets) < 2 or min(len(s) for s in sets) <= k:
        return float("nan")
    angles = [group_angles(sets[i], sets[j], k=k).mean() for i in range(len(sets)) for j in range(i + 1, len(sets))]
    return float(np.mean(angles))


GRAM_CHUNK = 8192  # vocabulary columns at a time in logit_gram (float64)


def logit_gram(w_u: Float[Tensor, "d vocab"], *, chunk: int = GRAM_CHUNK) -> Float[Tensor, "d d"]:
    """``W_U W_Uᵀ`` in float64, ``chunk`` vocabulary columns at a time: the inner product of two
    states' logit vectors is ``a G bᵀ``, so their cosines never need the ``[n, vocab]`` logits."""
    d, vocab = w_u.shape
    gram = torch.zeros(d, d, dtype=torch.float64)
    for s in range(0, vocab, chunk):
        w = w_u[:, s : s + chunk].double()
        gram += w @ w.T
    return gram


def _readout(parts, h, gram, w_u, g, predicted) -> dict[str, dict[str, float]]:
    """Per part: mean cosine of its (norm-folded) logit vector with the state's, through the Gram
    matrix ``gram = W_U W_Uᵀ``, and mean share of the predicted token's logit."""
    scale = torch.ones(h.shape[1], dtype=torch.float64) if g is None else g.double()
    hs = h * scale
    full_sq = ((hs @ gram) * hs).sum(-1)  # ||W_Uᵀ(g ⊙ h)||²
    col = w_u[:, predicted].T.double() * scale  # [n, d]: the predicted token's folded readout
    total = (h * col).sum(-1)
    out = {}
    for p, x in parts.items():
        xs = x * scale
        xg = xs @ gram
        cos = (xg * hs).sum(-1) / ((xg * xs).sum(-1).clamp_min(0) * full_sq.clamp_min(0)).sqrt().clamp_min(1e-30)
        share = (x * col).sum(-1) / torch.where(total.abs() > 0, total, torch.ones_like(total))
        out[p] = {"readout_cos": float(cos.mean()), "logit_share": float(share.median())}
    return out
