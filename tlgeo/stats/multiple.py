"""p-values from a bootstrap and their multiple-comparison control (numpy, scipy; no models).

* :func:`wald_pvalue`: the two-sided p-value of an estimate given its standard error, e.g. a bootstrap SE,
  against the normal or, given the degrees of freedom of a small sample, Student's t; never NaN (an undefined
  estimate or SE gives ``p = 1``).
* :func:`mean_test_pvalue`: the two-sided one-sample t-test p-value of a mean of ``n`` independent values
  (honest at a handful of values, where a normal reference is not).
* :func:`significant_digits`: a p-value at the precision it has (two significant digits).
* :func:`bh_qvalues`: Benjamini–Hochberg q-values (``scipy.stats.false_discovery_control``) over one family
  of p-values; NaN entries are left out of the family and stay NaN.

:func:`tlgeo.stats.resampling.benjamini_hochberg` is the older BH of the paired tests (same numbers, no NaN
allowed)."""

from __future__ import annotations

from ..errors import InputError
import numpy as np

__all__ = ["wald_pvalue", "mean_test_pvalue", "mean_test_pvalues", "significant_digits", "bh_qvalues", "proportion_ci"]


def wald_pvalue(estimate, se, df=None) -> np.ndarray:
    """Two-sided ``2 * (1 - Phi(|estimate| / se))`` for ``H0: estimate = 0``, float64, broadcast; with ``df``
    (the independent units less one, e.g. the windows a bootstrap resampled), Student's t with ``df`` degrees
    of freedom in place of the normal ``Phi``: at ten units the normal's p of ``|estimate| / se = 5`` is
    5.7e-7, the t's 7.4e-4 (``df < 1``: ``p = 1``).

    ``p = 1`` where the estimate is NaN (undefined, e.g. a constant quantity's correlation) or the SE is NaN
    (too few resamples); where ``se == 0`` (every resample gave the same value), ``p = 0`` for a non-zero
    estimate and ``p = 1`` for zero."""
    from scipy.stats import norm, t

    if df is not None and df < 1:
        return np.ones(np.broadcast(np.asarray(estimate), np.asarray(se)).shape)
    est = np.asarray(estimate, dtype=np.float64)
    se = np.asarray(se, dtype=np.float64)
    est, se = np.broadcast_arrays(est, se)
    if np.any(se < 0):
        raise InputError("standard errors must be >= 0")
    p = np.ones(est.shape)
    ok = np.isfinite(est) & np.isfinite(se)
    pos = ok & (se > 0)
    tail = norm.sf if df is None else (lambda z: t.sf(z, df))
    p[pos] = 2 * tail(np.abs(est[pos]) / se[pos])
    p[ok & (se == 0) & (est != 0)] = 0.0
    return np.clip(p, 0.0, 1.0)


def mean_test_pvalue(values) -> float:
    """Two-sided p of ``H0: mean = 0`` for ``n`` independent ``values``: the one-sample t-test
    (``scipy.stats.ttest_1samp``, ``n - 1`` degrees of freedom), exact for normal values at any ``n`` and the
    reference a handful of prompts needs (a normal reference with a bootstrap SE gave p = 1e-300 at 8 prompts).
    ``p = 1`` with fewer than two values, NaN among them or all of them 0; ``p = 0`` when they are all the same
    non-zero value."""
    return float(mean_test_pvalues(np.asarray(values, dtype=np.float64).ravel()))


def mean_test_pvalues(values) -> np.ndarray:
    """:func:`mean_test_pvalue` over the last axis of ``values [..., n]`` at once (a simulation's samples):
    ``p [...]``, float64, the same special cases row by row."""
    from scipy.stats import t as student

    x = np.asarray(values, dtype=np.float64)
    p = np.ones(x.shape[:-1])
    n = x.shape[-1]
    if n < 2:
        return p
    finite = np.isfinite(x).all(-1)
    xs = np.where(finite[..., None], x, 0.0)
    const = finite & (xs == xs[..., :1]).all(-1) & xs.any(-1)
    ok = finite & xs.any(-1) & ~const
    with np.errstate(divide="ignore", invalid="ignore"):
        tstat = np.abs(xs.mean(-1)) / (xs.std(-1, ddof=1) / np.sqrt(n))
    p[ok] = 2 * student.sf(tstat[ok], n - 1)
    p[const] = 0.0
    return np.clip(p, 0.0, 1.0)


def significant_digits(p, digits: int = 2) -> np.ndarray:
    """``p`` rounded to ``digits`` significant digits (float64, broadcast; 0 and NaN kept): what a p-value
    from a sample of prompts or windows can say, written as such in a table."""
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where((p > 0) & np.isfinite(p), 10.0 ** (digits - 1 - np.floor(np.log10(np.abs(p)))), 1.0)
    return np.where((p > 0) & np.isfinite(p), np.round(p * scale) / scale, p)


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
        raise InputError("p-values must lie in [0, 1]")
    if ok.any():
        q[ok] = false_discovery_control(p[ok], method="bh")
    return q


def proportion_ci(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of the proportion ``k / n`` (``scipy.stats.binomtest``), as fractions; ``(nan, nan)``
    for ``n = 0``. Honest at small ``n`` and near 0 or 1, where the normal interval leaves [0, 1]."""
    if n == 0:
        return float("nan"), float("nan")
    if not 0 <= k <= n:
        raise InputError(f"k = {k} successes out of n = {n}: need 0 <= k <= n")
    from scipy.stats import binomtest

    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)
