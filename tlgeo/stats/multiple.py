"""p-values from a bootstrap and their multiple-comparison control (numpy, scipy; no models).

* :func:`wald_pvalue`: the two-sided normal (Wald) p-value of an estimate given its standard error,
  e.g. a bootstrap SE; never NaN (an undefined estimate or SE gives ``p = 1``).
* :func:`bh_qvalues`: Benjamini–Hochberg q-values (``scipy.stats.false_discovery_control``) over one family
  of p-values; NaN entries are left out of the family and stay NaN.

:func:`tlgeo.stats.resampling.benjamini_hochberg` is the older BH of the paired tests (same numbers, no NaN
allowed)."""

from __future__ import annotations

import numpy as np

__all__ = ["wald_pvalue", "bh_qvalues"]


def wald_pvalue(estimate, se) -> np.ndarray:
    """Two-sided ``2 * (1 - Phi(|estimate| / se))`` for ``H0: estimate = 0``, float64, broadcast.

    ``p = 1`` where the estimate is NaN (undefined, e.g. a constant quantity's correlation) or the SE is NaN
    (too few resamples); where ``se == 0`` (every resample gave the same value), ``p = 0`` for a non-zero
    estimate and ``p = 1`` for zero."""
    from scipy.stats import norm

    est = np.asarray(estimate, dtype=np.float64)
    se = np.asarray(se, dtype=np.float64)
    est, se = np.broadcast_arrays(est, se)
    if np.any(se < 0):
        raise ValueError("standard errors must be >= 0")
    p = np.ones(est.shape)
    ok = np.isfinite(est) & np.isfinite(se)
    pos = ok & (se > 0)
    p[pos] = 2 * norm.sf(np.abs(est[pos]) / se[pos])
    p[ok & (se == 0) & (est != 0)] = 0.0
    return np.clip(p, 0.0, 1.0)


def bh_qvalues(pvalues) -> np.ndarray:
    """Benjamini–Hochberg q-values of ``pvalues`` (any shape, one family: every finite entry), float64.

    ``scipy.stats.false_discovery_control(p, method="bh")`` over the non-NaN entries; NaN stays NaN.
    Rejecting ``q < a`` controls the false discovery rate at ``a`` (independent or positively dependent
    tests). ``q >= p`` entry by entry, and ``q`` is monotone in ``p``."""
    from scipy.stats import false_discovery_control

    p = np.asarray(pvalues, dtype=np.float64)
    q = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if np.any((p[ok] < 0) | (p[ok] > 1)):
        raise ValueError("p-values must lie in [0, 1]")
    if ok.any():
        q[ok] = false_discovery_control(p[ok], method="bh")
    return q
