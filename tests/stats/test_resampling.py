import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlgeo.stats import (
    benjamini_hochberg,
    bootstrap_ci,
    paired_test,
    sign_flip_pvalue,
    weighted_mean,
)

finite = st.floats(-100, 100, allow_nan=False, allow_infinity=False)


@st.composite
def diffs_and_weights(draw, min_size=1, max_size=12):
    n = draw(st.integers(min_size, max_size))
    d = draw(st.lists(finite, min_size=n, max_size=n))
    w = draw(st.lists(st.integers(1, 500), min_size=n, max_size=n))
    return np.array(d), np.array(w, dtype=float)


def test_weighted_mean_is_token_mean():
    # two texts: 1 token with diff 3, 3 tokens with diff 1 -> per-token mean 1.5
    assert weighted_mean([3.0, 1.0], [1, 3]) == pytest.approx(1.5)
    assert weighted_mean([3.0, 1.0]) == pytest.approx(2.0)


@settings(max_examples=60, deadline=None)
@given(diffs_and_weights(min_size=1))
def test_ci_contains_point_estimate(dw):
    d, w = dw
    est = weighted_mean(d, w)
    low, high = bootstrap_ci(d, w, n_boot=400, seed=1)
    tol = 1e-9 * (1 + np.abs(d).max())
    assert low - tol <= est <= high + tol


def test_bootstrap_matches_normal_theory():
    rng = np.random.default_rng(0)
    d = rng.normal(0.5, 1.0, size=200)
    low, high = bootstrap_ci(d, n_boot=4000, seed=0)
    se = d.std(ddof=1) / np.sqrt(d.size)
    assert low == pytest.approx(d.mean() - 1.96 * se, abs=0.3 * se)
    assert high == pytest.approx(d.mean() + 1.96 * se, abs=0.3 * se)


def test_bootstrap_weights_matter():
    # a heavy text with a large difference pulls the estimate and the interval
    d, w = np.array([0.0, 0.0, 0.0, 1.0]), np.array([1.0, 1.0, 1.0, 100.0])
    assert weighted_mean(d, w) > 0.9
    low, high = bootstrap_ci(d, w, n_boot=2000, seed=0)
    assert low == 0.0 and high > 0.99  # resamples without the heavy text give 0
    assert bootstrap_ci(d, n_boot=2000, seed=0)[1] <= 0.75  # unweighted: at most 3 of 4 draws


def test_seeded_reproducibility():
    d = np.random.default_rng(3).normal(size=30)
    w = np.arange(1, 31)
    assert bootstrap_ci(d, w, seed=7, n_boot=500) == bootstrap_ci(d, w, seed=7, n_boot=500)
    assert sign_flip_pvalue(d, w, seed=7, n_perm=500) == sign_flip_pvalue(d, w, seed=7, n_perm=500)
    assert paired_test(d, w, seed=5, n_perm=300) == paired_test(d, w, seed=5, n_perm=300)
    assert bootstrap_ci(d, w, seed=7, n_boot=500) != bootstrap_ci(d, w, seed=8, n_boot=500)


def test_sign_flip_exact_hand_computation():
    # n=3, all positive: only the all-plus and all-minus patterns reach |sum| = 6 -> p = 2/8
    assert sign_flip_pvalue([1.0, 2.0, 3.0], n_perm=10000) == pytest.approx(0.25)
    # |1 + 2 - 3| = 0: every pattern is at least as extreme
    assert sign_flip_pvalue([1.0, 2.0, -3.0], n_perm=10000) == pytest.approx(1.0)
    # weights enter the statistic: d=[2,2,-1], w=[1,1,4] -> x ~ [2,2,-4], obs 0 -> p = 1,
    # while unweighted |2+2-1| = 3 is reached by 4 of the 8 patterns -> p = 0.5
    assert sign_flip_pvalue([2.0, 2.0, -1.0], [1, 1, 4]) == pytest.approx(1.0)
    assert sign_flip_pvalue([2.0, 2.0, -1.0]) == pytest.approx(0.5)


def test_sign_flip_detects_shift_and_monte_carlo_floor():
    d = np.random.default_rng(0).normal(1.0, 1.0, size=40)
    p = sign_flip_pvalue(d, n_perm=2000, seed=0)
    assert p == pytest.approx(1 / 2001)  # nothing as extreme: the (1 + hits) / (1 + n) floor


def test_sign_flip_uniform_under_null():
    rng = np.random.default_rng(123)
    ps = np.array(
        [
            sign_flip_pvalue(rng.standard_t(3, size=15), rng.integers(20, 200, size=15), n_perm=300, seed=rng)
            for _ in range(400)
        ]
    )
    # the Monte-Carlo p-value is valid: P(p <= a) <= a (+ noise), and close to a
    for a in (0.05, 0.2, 0.5):
        assert abs((ps <= a).mean() - a) < 0.06, (a, (ps <= a).mean())
    # roughly flat histogram in 5 bins (binomial sd ~ 0.02 per bin)
    hist = np.histogram(ps, bins=5, range=(0, 1))[0] / ps.size
    assert np.all(np.abs(hist - 0.2) < 0.08), hist


def test_bh_hand_computation():
    p = np.array([0.01, 0.04, 0.03, 0.20])
    # sorted 0.01, 0.03, 0.04, 0.20 -> m p / rank = 0.04, 0.06, 0.0533, 0.20 -> step-up min
    expected = np.array([0.04, 0.05333333, 0.05333333, 0.20])
    np.testing.assert_allclose(benjamini_hochberg(p), expected, rtol=1e-6)
    assert benjamini_hochberg([]).size == 0
    np.testing.assert_allclose(benjamini_hochberg([0.9, 0.95]), [0.95, 0.95])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=40))
def test_bh_properties(ps):
    p = np.array(ps)
    q = benjamini_hochberg(p)
    assert np.all(q >= p - 1e-12) and np.all(q <= 1)
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(q[order]) >= -1e-12)  # monotone in p
    try:
        from scipy.stats import false_discovery_control
    except ImportError:
        return
    np.testing.assert_allclose(q, false_discovery_control(p, method="bh"), rtol=1e-9, atol=1e-12)


def test_paired_test_fields():
    d = np.array([0.1, 0.2, 0.15, 0.3, 0.05])
    w = np.array([10, 20, 30, 40, 50])
    r = paired_test(d, w, n_perm=1000, seed=0)
    assert r.estimate == pytest.approx((d * w).sum() / w.sum())
    assert r.ci_low <= r.estimate <= r.ci_high
    assert r.p == pytest.approx(2 / 32)  # exact with 5 texts: only +-all reach the observed sum
    assert r.n_texts == 5 and r.n_tokens == 150


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: bootstrap_ci([]), "no differences"),
        (lambda: bootstrap_ci([1.0, np.nan]), "NaN"),
        (lambda: bootstrap_ci([1.0, 2.0], [1.0]), "weights"),
        (lambda: bootstrap_ci([1.0], [0.0]), "not all zero"),
        (lambda: bootstrap_ci([1.0], n_boot=0), "n_boot"),
        (lambda: sign_flip_pvalue([1.0], n_perm=0), "n_perm"),
        (lambda: benjamini_hochberg([0.5, 1.5]), r"\[0, 1\]"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_group_resamples_draw_whole_groups():
    from tlgeo.stats.resampling import group_resamples

    groups = np.array([0, 0, 1, 1, 1, 2])
    draws = list(group_resamples(groups, 50, seed=3))
    assert len(draws) == 50
    for idx in draws:
        counts = np.bincount(groups[idx], minlength=3)
        assert all(c % size == 0 for c, size in zip(counts, (2, 3, 1)))  # never part of a group
        assert sum(c // size for c, size in zip(counts, (2, 3, 1))) == 3  # as many groups as there are
    again = list(group_resamples(groups, 50, seed=3))
    assert all(np.array_equal(a, b) for a, b in zip(draws, again))


def test_ratio_ci_is_a_ratio_of_means_ci():
    from tlgeo.stats.resampling import ratio_ci

    rng = np.random.default_rng(1)
    den = 2 + rng.normal(size=400)
    num = 0.5 * den + 0.2 * rng.normal(size=400)
    lo, hi = ratio_ci(num, den, n_boot=800)
    assert lo < num.sum() / den.sum() < hi and hi - lo < 0.1
    assert np.isnan(ratio_ci([1.0, 2.0], [0.0, 0.0])).all()  # every resample divides by 0
    with pytest.raises(ValueError, match="equal-length"):
        ratio_ci([1.0], [1.0, 2.0])


@pytest.mark.parametrize("n, n_perm", [(6, 10000), (12, 10000), (30, 2000)])
def test_the_sign_flip_interval_is_every_mean_its_test_does_not_reject(n, n_perm):
    """The reference is the test itself, run on ``d - mu`` for a grid of ``mu`` with the same sign patterns
    (exhaustive at 6 and 12 texts, random at 30)."""
    from tlgeo.stats.resampling import sign_flip_test

    rng = np.random.default_rng(n)
    for trial in range(4):
        d = rng.lognormal(0, 1, n) - 1.2 + 0.3 * trial
        w = rng.integers(5, 50, n).astype(float)
        t = sign_flip_test(d, w, n_perm=n_perm, seed=7)
        assert t.p == sign_flip_pvalue(d, w, n_perm=n_perm, seed=7)
        assert (not (t.low <= 0 <= t.high)) == (t.p < 0.05)
        if not np.isfinite(t.low):
            continue
        width = t.high - t.low
        for mu in np.linspace(t.low - width / 2, t.high + width / 2, 25):
            if min(abs(mu - t.low), abs(mu - t.high)) < 1e-9 * max(1.0, width):
                continue
            kept = sign_flip_pvalue(d - mu, w, n_perm=n_perm, seed=7) >= 0.05
            assert kept == (t.low <= mu <= t.high), (mu, t)


def test_five_texts_reject_nothing_so_their_interval_is_unbounded():
    from tlgeo.stats.resampling import sign_flip_test

    t = sign_flip_test([0.1, 0.2, 0.15, 0.3, 0.05])
    assert t.p == pytest.approx(2 / 32) and t.low == -np.inf and t.high == np.inf
    r = paired_test(np.arange(1.0, 13.0), n_perm=10000)  # 12 positive texts: p = 2 / 4096
    assert r.p == pytest.approx(2 / 4096) and 0 < r.ci_low <= r.estimate <= r.ci_high < 12
