"""Rank correlation with a bootstrap CI (scipy; no models).

:func:`spearman_ci` gives Spearman's rho of ``x`` and ``y`` (``scipy.stats.spearmanr``)
and a percentile bootstrap CI that resamples items, or *groups* of items (e.g.
the tokens of one sequence) when ``groups`` is given.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .resampling import group_resamples

__all__ = ["Correlation", "spearman_ci"]


class Correlation(NamedTuple):
    rho: float
    ci_low: float
    ci_high: float
    n: int


def spearman_ci(x, y, *, groups=None, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> Correlation:
    """Spearman's rho of ``x`` and ``y`` with a percentile bootstrap CI (NaN where undefined)."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be 1-d of the same length, got shapes {x.shape} and {y.shape}")
    if len(x) < 3:
        raise ValueError(f"a rank correlation needs at least 3 items, got {len(x)}")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("x and y must be finite")
    rho = float(spearmanr(x, y).statistic) if np.ptp(x) > 0 and np.ptp(y) > 0 else float("nan")
    groups = np.arange(len(x)) if groups is None else np.asarray(groups)
    if groups.shape != x.shape:
        raise ValueError(f"groups has {len(groups)} entries for {len(x)} items")
    boots = []
    for idx in group_resamples(groups, n_boot, seed):
        if np.ptp(x[idx]) > 0 and np.ptp(y[idx]) > 0:
            boots.append(spearmanr(x[idx], y[idx]).statistic)
    a = (1 - level) / 2
    lo, hi = (np.quantile(boots, [a, 1 - a]) if boots else (np.nan, np.nan))
    return Correlation(rho, float(lo), float(hi), len(x))
