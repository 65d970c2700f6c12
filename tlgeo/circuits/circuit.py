"""Circuits from edge scores: the top-k edges, their faithfulness (the metric recovered with every other edge reading
the corrupted run), the faithfulness curve over k, its area, the smallest k reaching a level, and the check of the
top edges' scores against exact edge patching.

``recovered(k) = (M(circuit of the k top edges) - M(corrupted)) / (M(clean) - M(corrupted))``: 1 when the circuit
alone carries the clean behaviour, 0 when it carries none of it. The area is the trapezoid area under ``recovered``
over the share of edges kept, from 0 to every edge (as the circuit performance ratio of MIB, Mueller et al. 2025,
is, over its own grid of shares).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from scipy import stats
from torch import Tensor

from ..errors import InputError
from .edges import exact_scores, faithfulness_runs
from .eap import Metric
from .graph import Graph

__all__ = [
    "SHARES",
    "ranked_edges",
    "circuit_mask",
    "default_ks",
    "faithfulness_curve",
    "k_at",
    "curve_area",
    "smallest_faithful_k",
    "verify_edges",
    "rank_agreement",
]

SHARES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)  # MIB's shares of edges kept (and 0, 1)
COUNTS = (1, 2, 3, 5, 8, 13, 20, 30, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)


def ranked_edges(graph: Graph, scores: Tensor) -> list[tuple[int, int]]:
    """Every edge ``(sender, receiver)`` by ``|score|``, largest first (ties: index order)."""
    s_idx, r_idx = torch.nonzero(graph.valid, as_tuple=True)
    size = scores[s_idx, r_idx].abs().double().nan_to_num(0.0).numpy()
    order = np.argsort(-size, kind="stable")
    return [(int(s_idx[i]), int(r_idx[i])) for i in order]


def circuit_mask(graph: Graph, order: Sequence[tuple[int, int]], k: int) -> Tensor:
    """``[senders, receivers]`` bool: the first ``k`` edges of ``order``."""
    m = torch.zeros(graph.n_senders, graph.n_receivers, dtype=torch.bool)
    for s, r in order[:k]:
        m[s, r] = True
    return m


def default_ks(n_edges: int) -> list[int]:
    """0, every edge, MIB's shares of the edges (:data:`SHARES`) and a few small counts."""
    ks = {0, n_edges, *(round(f * n_edges) for f in SHARES), *(c for c in COUNTS if c < n_edges)}
    return sorted(ks)


def faithfulness_curve(
    model,
    graph: Graph,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    order: Sequence[tuple[int, int]],
    ks: Sequence[int],
    *,
    clean_metric: float,
    corrupted_metric: float,
    batch_size: int = 16,
    max_rows: int = 256,
) -> pd.DataFrame:
    """One row per ``k``: ``k``, ``share`` (of the edges), ``metric`` (mean over prompts) and ``recovered``."""
    ks = sorted(set(int(k) for k in ks))
    bad = [k for k in ks if not 0 <= k <= len(order)]
    if bad:
        raise InputError(f"k {bad[0]} out of range: the graph has {len(order)} edges (0..{len(order)})")
    got = faithfulness_runs(
        model,
        graph,
        clean,
        corrupted,
        [circuit_mask(graph, order, k) for k in ks],
        metric,
        batch_size=batch_size,
        max_rows=max_rows,
    )
    gap = clean_metric - corrupted_metric
    rec = (got.numpy() - corrupted_metric) / gap if gap else np.full(len(ks), np.nan)
    return pd.DataFrame(
        {"k": ks, "share": [k / max(1, len(order)) for k in ks], "metric": got.numpy(), "recovered": rec}
    )


def k_at(curve: pd.DataFrame, level: float) -> float:
    """The smallest ``k`` of ``curve`` whose ``recovered`` reaches ``level`` (NaN if none does)."""
    hit = curve[curve["recovered"] >= level]
    return float(hit["k"].min()) if len(hit) else math.nan


def smallest_faithful_k(
    model,
    graph: Graph,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    order: Sequence[tuple[int, int]],
    curve: pd.DataFrame,
    level: float,
    *,
    clean_metric: float,
    corrupted_metric: float,
    batch_size: int = 16,
    max_rows: int = 256,
    tolerance: float = 0.0,
) -> pd.DataFrame:
    """``curve`` with the points of a bisection between the largest ``k`` below ``level`` before the first reaching it
    and that first one (one forward per step), so that :func:`k_at` gives the smallest ``k`` reaching ``level``
    where ``recovered`` grows with ``k`` between them. ``tolerance`` > 0 stops the bisection once the bracket is
    within that share of its upper end (:func:`k_at` then overstates the smallest ``k`` by less than that share)."""
    hi = k_at(curve, level)
    if math.isnan(hi):
        return curve
    below = curve[(curve["k"] < hi)]
    lo = int(below["k"].max()) if len(below) else 0
    hi = int(hi)
    rows = [curve]
    while hi - lo > max(1, math.floor(tolerance * hi)):
        mid = (lo + hi) // 2
        got = faithfulness_curve(
            model,
            graph,
            clean,
            corrupted,
            metric,
            order,
            [mid],
            clean_metric=clean_metric,
            corrupted_metric=corrupted_metric,
            batch_size=batch_size,
            max_rows=max_rows,
        )
        rows.append(got)
        if float(got["recovered"].iloc[0]) >= level:
            hi = mid
        else:
            lo = mid
    return pd.concat(rows, ignore_index=True).drop_duplicates("k").sort_values("k", ignore_index=True)


def curve_area(curve: pd.DataFrame) -> float:
    """The trapezoid area under ``recovered`` over ``share`` (the curve must hold ``k`` 0 and every edge)."""
    c = curve.sort_values("share")
    if not len(c) or c["share"].iloc[0] != 0 or c["share"].iloc[-1] != 1:
        return math.nan
    x, y = c["share"].to_numpy(float), c["recovered"].to_numpy(float)
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2))


def verify_edges(
    model,
    graph: Graph,
    clean: Tensor,
    corrupted: Tensor,
    metric: Metric,
    edges: Sequence[tuple[int, int]],
    *,
    clean_metric: float,
    batch_size: int = 16,
    max_rows: int = 256,
) -> np.ndarray:
    """Exact edge patching of ``edges``: the mean metric change with each edge alone reading the corrupted
    sender (the quantity EAP estimates to first order)."""
    return exact_scores(
        model,
        graph,
        clean,
        corrupted,
        list(edges),
        metric,
        clean_metric=clean_metric,
        batch_size=batch_size,
        max_rows=max_rows,
    ).numpy()


def rank_agreement(estimate: np.ndarray, exact: np.ndarray) -> dict[str, float]:
    """Spearman's rho of ``|estimate|`` with ``|exact|`` (the ranking a circuit is cut from), and the share of
    edges whose signs agree."""
    if len(estimate) < 3:
        return {"spearman": math.nan, "sign_agreement": math.nan}
    rho = stats.spearmanr(np.abs(estimate), np.abs(exact)).statistic
    return {"spearman": float(rho), "sign_agreement": float(np.mean(np.sign(estimate) == np.sign(exact)))}
