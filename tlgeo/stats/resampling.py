"""Pure statistics for per-text paired differences (no models, no torch needed).

The unit is a *text*: each text ``i`` contributes a paired difference ``d_i``
(e.g. mean loss under an edit minus mean loss without it) and a weight
``w_i`` (its number of scored tokens). The point estimate is the token-weighted
mean ``sum w_i d_i / sum w_i``, i.e. the mean per-token difference over all
tokens.

* :func:`bootstrap_ci`: percentile bootstrap CI, resampling texts with
  replacement (token-weighted mean of each resample);
* :func:`ratio_ci` / :func:`ratio_bootstrap`: the CI (and standard error) of a ratio of means;
* :func:`sign_flip_pvalue`: two-sided sign-flip permutation test of
  "the differences are symmetric around 0" (exact when ``2**n <= n_perm``);
  :func:`sign_flip_test` with the interval that inverts it (excludes 0 exactly when the test rejects);
* :func:`benjamini_hochberg`: BH-adjusted q-values (step-up FDR control);
* :func:`paired_test`: estimate, the inverted sign-flip interval and p for one set of differences.

Every random function takes ``seed`` (an ``int`` or a ``numpy.random.Generator``)
and is reproducible for a fixed integer seed.
"""

from __future__ import annotations

from ..errors import InputError
from dataclasses import asdict, dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "weighted_mean",
    "bootstrap_ci",
    "ratio_ci",
    "ratio_bootstrap",
    "RatioBootstrap",
    "group_resamples",
    "sign_flip_pvalue",
    "sign_flip_test",
    "SignFlipTest",
    "benjamini_hochberg",
    "paired_test",
    "PairedTest",
]

_CHUNK = 1 << 20  # elements per resampling chunk (bounds memory)


def _rng(seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _check(diffs, weights) -> tuple[np.ndarray, np.ndarray]:
    """``d`` and ``w`` as float64 ``[n]`` arrays; clear errors for bad input."""
    d = np.asarray(diffs, dtype=np.float64).reshape(-1)
    if d.size == 0:
        raise InputError("no differences given: need at least one text")
    if not np.all(np.isfinite(d)):
        raise InputError("differences contain NaN or inf")
    if weights is None:
        w = np.ones_like(d)
    else:
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        if w.shape != d.shape:
            raise InputError(f"{w.size} weights for {d.size} differences")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise InputError("weights must be finite, non-negative and not all zero")
    return d, w


def weighted_mean(diffs, weights=None) -> float:
    """``sum w_i d_i / sum w_i`` (plain mean without weights)."""
    d, w = _check(diffs, weights)
    return float((w * d).sum() / w.sum())


def bootstrap_ci(diffs, weights=None, *, n_boot: int = 5000, level: float = 0.95, seed=0) -> tuple[float, float]:
    """Percentile bootstrap CI ``(low, high)`` of the token-weighted mean of ``diffs``.

    Texts are resampled with replacement (``n`` draws out of ``n``); each
    resample's statistic is ``sum c_i w_i d_i / sum c_i w_i`` with ``c_i`` the
    draw counts. ``diffs``, ``weights``: ``[n]``.
    """
    d, w = _check(diffs, weights)

    def stat(idx: np.ndarray) -> np.ndarray:
        ww = w[idx]
        den = ww.sum(1)
        # a resample drawing only zero-weight texts has no tokens: fall back to its plain mean
        return np.where(den > 0, (ww * d[idx]).sum(1) / np.where(den > 0, den, 1), d[idx].mean(1))

    return _percentile_ci(d.size, stat, n_boot, level, seed)


def _percentile_ci(n: int, stat, n_boot: int, level: float, seed) -> tuple[float, float]:
    """Percentile CI of ``stat(idx)`` over ``n_boot`` resamples of ``n`` items (``idx [m, n]``, drawn
    in chunks that bound memory); non-finite statistics are left out (NaN bounds if all are)."""
    return _quantiles(_bootstrap_stats(n, stat, n_boot, level, seed), level)


def _bootstrap_stats(n: int, stat, n_boot: int, level: float, seed) -> np.ndarray:
    """The finite values of ``stat(idx)`` over ``n_boot`` resamples of ``n`` items (``idx [m, n]``,
    drawn in chunks that bound memory)."""
    if n_boot < 1:
        raise InputError(f"n_boot must be >= 1, got {n_boot}")
    if not 0 < level < 1:
        raise InputError(f"level must be in (0, 1), got {level}")
    rng = _rng(seed)
    stats = np.empty(n_boot)
    step = max(1, _CHUNK // n)
    for start in range(0, n_boot, step):
        m = min(step, n_boot - start)
        stats[start : start + m] = stat(rng.integers(0, n, size=(m, n)))
    return stats[np.isfinite(stats)]


def _quantiles(stats: np.ndarray, level: float) -> tuple[float, float]:
    if stats.size == 0:
        return float("nan"), float("nan")
    tail = (1 - level) / 2
    low, high = np.quantile(stats, [tail, 1 - tail])
    return float(low), float(high)


def ratio_ci(num, den, *, n_boot: int = 2000, level: float = 0.95, seed=0) -> tuple[float, float]:
    """Percentile bootstrap CI ``(low, high)`` of ``sum(num) / sum(den)`` (a ratio of means), items
    ``[n]`` resampled with replacement, ``num`` and ``den`` together. Resamples whose ``den`` sums
    to 0 are left out (NaN bounds if all are)."""
    b = ratio_bootstrap(num, den, n_boot=n_boot, level=level, seed=seed)
    return b.low, b.high


class RatioBootstrap(NamedTuple):
    """The percentile CI ``(low, high)`` and the bootstrap standard error ``se`` of a ratio of means."""

    low: float
    high: float
    se: float


def ratio_bootstrap(num, den, *, n_boot: int = 2000, level: float = 0.95, seed=0) -> RatioBootstrap:
    """:func:`ratio_ci` (the same resamples, so the same bounds for the same seed) and the standard
    error of ``sum(num) / sum(den)``: the standard deviation (``ddof=1``) of the resamples' ratios,
    float64; 0 when every resample gives the same ratio, NaN with fewer than two defined."""
    a, b = np.asarray(num, dtype=np.float64).ravel(), np.asarray(den, dtype=np.float64).ravel()
    if a.shape != b.shape or a.size == 0:
        raise InputError(f"num and den must be equal-length, non-empty; got {a.shape} and {b.shape}")

    def stat(idx: np.ndarray) -> np.ndarray:
        d = b[idx].sum(1)
        return np.where(d != 0, a[idx].sum(1) / np.where(d != 0, d, 1), np.nan)

    stats = _bootstrap_stats(a.size, stat, n_boot, level, seed)
    low, high = _quantiles(stats, level)
    if stats.size < 2:
        se = float("nan")
    elif np.all(stats == stats[0]):
        se = 0.0  # exactly: np.std of equal values may round to a tiny non-zero number
    else:
        se = float(np.std(stats, ddof=1))
    return RatioBootstrap(low, high, se)


def group_resamples(groups, n_boot: int, seed=0):
    """``n_boot`` index arrays, each a bootstrap resample of whole groups (``groups [n]``: the
    unit of each item; every item its own unit when all values differ), drawn with replacement."""
    groups = np.asarray(groups)
    units = [np.flatnonzero(groups == g) for g in np.unique(groups)]
    rng = _rng(seed)
    for _ in range(n_boot):
        yield np.concatenate([units[i] for i in rng.integers(0, len(units), len(units))])


def _sign_sums(x: np.ndarray, u: np.ndarray, n_perm: int, seed) -> tuple[np.ndarray, np.ndarray, bool]:
    """For the sign patterns of the sign-flip test over ``n`` items (every one of the ``2**n`` when
    ``2**n <= n_perm`` and ``n <= 20``, else ``n_perm`` random ones drawn in chunks that bound memory): the signed
    sums ``s @ x`` and ``s @ u`` of each pattern, and whether the patterns are exhaustive."""
    n = x.size
    if n <= 20 and 2**n <= n_perm:  # exact: all sign patterns
        signs = 1 - 2 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)
        return signs @ x, signs @ u, True
    rng = _rng(seed)
    sx, su = np.empty(n_perm), np.empty(n_perm)
    step = max(1, _CHUNK // n)
    for start in range(0, n_perm, step):
        m = min(step, n_perm - start)
        signs = rng.integers(0, 2, size=(m, n)) * 2 - 1
        sx[start : start + m], su[start : start + m] = signs @ x, signs @ u
    return sx, su, False


def sign_flip_pvalue(diffs, weights=None, *, n_perm: int = 10000, seed=0) -> float:
    """Two-sided sign-flip permutation p-value of the token-weighted mean of ``diffs``.

    Null hypothesis: each paired difference is symmetric around 0, so its sign
    is exchangeable. Statistic ``T = |sum w_i s_i d_i|``. When ``2**n <= n_perm``
    every sign pattern is enumerated and the p-value is exact
    (``#{T_s >= T_obs} / 2**n``); otherwise ``n_perm`` random patterns give
    ``(1 + #{T_s >= T_obs}) / (1 + n_perm)`` (never 0, valid at every level).
    """
    return sign_flip_test(diffs, weights, n_perm=n_perm, seed=seed).p


class SignFlipTest(NamedTuple):
    """The sign-flip test's p of ``mean = 0`` and its inversion: every ``mu`` it does not reject at ``level``."""

    p: float
    low: float
    high: float


def sign_flip_test(diffs, weights=None, *, n_perm: int = 10000, level: float = 0.95, seed=0) -> SignFlipTest:
    """:func:`sign_flip_pvalue` and the interval that inverts it with the same sign patterns: every ``mu`` whose
    test of ``d - mu`` has ``p >= 1 - level``, so **the interval excludes 0 exactly when p < 1 - level**.

    For a pattern ``s``, ``|sum w s (d - mu)| >= |sum w (d - mu)|`` holds on a closed interval of ``mu`` around the
    weighted mean (a concave quadratic in ``mu``: ``|sum w s| <= sum w``), so the ``mu`` that enough patterns reach
    form an interval whose ends are order statistics of the patterns' own ends; infinite when even the sign
    patterns that hold every ``mu`` (all signs equal) are enough, e.g. 5 texts at ``level = 0.95``, whose smallest
    possible p is 2/32."""
    d, w = _check(diffs, weights)
    if n_perm < 1:
        raise InputError(f"n_perm must be >= 1, got {n_perm}")
    if not 0 < level < 1:
        raise InputError(f"level must be in (0, 1), got {level}")
    x, u = w * d / w.sum(), w / w.sum()
    mean = float(x.sum())
    sx, su, exact = _sign_sums(x, u, n_perm, seed)
    tol = 1e-12 * max(1.0, np.abs(x).sum())  # float ties count as "at least as extreme"
    hits = int((np.abs(sx) >= abs(mean) - tol).sum())
    p = hits / sx.size if exact else (1 + hits) / (1 + sx.size)
    # each pattern's interval {mu : (A - mu B)^2 >= (mean - mu)^2}, A = s.x, B = s.u, |B| <= 1
    a = su * su - 1.0
    b = 2.0 * (mean - sx * su)
    c = sx * sx - mean * mean
    flat = a > -1e-12  # every sign equal (B = +-1): the pattern reaches every mu
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.sqrt(np.maximum(b * b - 4 * a * c, 0.0))
        lo = np.where(flat, -np.inf, np.minimum((-b - root) / (2 * a), (-b + root) / (2 * a)))
        hi = np.where(flat, np.inf, np.maximum((-b - root) / (2 * a), (-b + root) / (2 * a)))
    alpha = 1 - level
    need = int(np.ceil(alpha * sx.size - 1e-9)) if exact else int(np.ceil(alpha * (1 + sx.size) - 1 - 1e-9))
    need = max(need, 1) if exact else max(need, 0)
    if not exact and need == 0:  # (1 + 0) / (1 + N) >= alpha: no mu can be rejected
        return SignFlipTest(float(p), -np.inf, np.inf)
    low = float(np.sort(lo)[need - 1]) if need <= lo.size else mean
    high = float(np.sort(hi)[::-1][need - 1]) if need <= hi.size else mean
    return SignFlipTest(float(p), min(low, mean), max(high, mean))


def benjamini_hochberg(pvalues) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (q-values), same shape as ``pvalues``.

    ``q_(i) = min_{j >= i} min(1, m p_(j) / j)`` over the sorted p-values
    (``scipy.stats.false_discovery_control(p, method="bh")``). Rejecting
    ``q <= a`` controls the false discovery rate at ``a``.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    shape = p.shape
    p = p.reshape(-1)
    if p.size == 0:
        return p.reshape(shape)
    if np.any(np.isnan(p)) or np.any((p < 0) | (p > 1)):
        raise InputError("p-values must lie in [0, 1] (no NaN)")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    q_sorted = np.minimum.accumulate(scaled[::-1])[::-1].clip(max=1.0)
    q = np.empty(m)
    q[order] = q_sorted
    return q.reshape(shape)


@dataclass(frozen=True)
class PairedTest:
    """Summary of one set of paired per-text differences."""

    estimate: float  # token-weighted mean difference
    ci_low: float  # the sign-flip test inverted: excludes 0 exactly when p < 1 - level
    ci_high: float
    p: float  # sign-flip permutation p-value (two-sided)
    n_texts: int
    n_tokens: float  # sum of weights

    def to_dict(self) -> dict:
        return asdict(self)


def paired_test(diffs, weights=None, *, n_perm: int = 10000, level: float = 0.95, seed=0) -> PairedTest:
    """Point estimate, interval and sign-flip p-value of per-text differences ``[n]``: one test and the
    interval that inverts it with the same sign patterns (:func:`sign_flip_test`), so the interval excludes 0
    exactly when ``p < 1 - level``. (A percentile bootstrap interval beside the sign-flip p, as before, could
    exclude 0 at a p of 0.1 over a handful of texts.)"""
    d, w = _check(diffs, weights)
    t = sign_flip_test(d, w, n_perm=n_perm, level=level, seed=seed)
    return PairedTest(weighted_mean(d, w), t.low, t.high, t.p, int(d.size), float(w.sum()))
