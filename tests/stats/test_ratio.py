"""Fieller's interval of a ratio of means and its agreement with the t-test of the numerators (float64)."""

import numpy as np
import pytest
from scipy.stats import ttest_1samp

from tlgeo.stats.ratio import fieller_interval, ratio_test, ratio_tests


def _samples(seed: int, count: int = 400):
    """Paired (num, den) samples of every shape a patching sweep meets: 2 to 64 prompts, normal, skewed and
    heavy-tailed numerators, effects from 0 to past the gap, gaps clear of 0 and not."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        n = int(rng.choice([2, 3, 4, 8, 16, 32, 64]))
        den = rng.normal(rng.choice([0.2, 1.0, 4.0]), 1.0, n)
        kind = i % 3
        noise = (rng.normal(size=n), rng.lognormal(0, 1, n) - np.exp(0.5), rng.standard_t(2, n))[kind]
        yield rng.choice([0.0, 0.1, 0.5, 1.2]) * den + rng.choice([0.1, 0.5, 2.0]) * noise, den


def test_the_interval_excludes_zero_exactly_when_the_t_test_rejects():
    for num, den in _samples(0):
        r = ratio_test(num, den)
        excludes = not (r.low <= 0 <= r.high)
        assert excludes == (r.p < 0.05), (num, den, r)


def test_the_bounded_interval_is_every_ratio_the_t_test_of_the_differences_does_not_reject():
    """The reference is scipy's t-test of ``num - rho den`` on a grid of rho, not the quadratic."""
    checked = 0
    for num, den in _samples(1, 120):
        r = ratio_test(num, den)
        if r.kind != "bounded" or not np.isfinite(r.estimate):
            continue
        width = r.high - r.low
        for rho in np.linspace(r.low - width, r.high + width, 41):
            if min(abs(rho - r.low), abs(rho - r.high)) < 1e-6 * max(1.0, width):
                continue  # the boundary itself: p == 0.05 up to rounding
            kept = ttest_1samp(num - rho * den, 0.0).pvalue >= 0.05
            assert kept == (r.low <= rho <= r.high), (rho, r)
        checked += 1
    assert checked > 50


def test_coverage_is_nominal_for_normal_prompts():
    """2,000 samples of 8 prompts with a known ratio 0.3: a 95 % interval covers it 93-97 % of the time, and
    the t-test of a true null rejects 3-7 % of the time."""
    rng = np.random.default_rng(2)
    cover = reject = 0
    for _ in range(2000):
        den = rng.normal(3.0, 1.0, 8)
        r = ratio_test(0.3 * den + 0.5 * rng.normal(size=8), den)
        cover += r.low <= 0.3 <= r.high
        reject += ratio_test(0.5 * rng.normal(size=8), den).p < 0.05
    assert 0.93 <= cover / 2000 <= 0.97
    assert 0.03 <= reject / 2000 <= 0.07


def test_two_prompts_bound_nothing_that_their_gap_does_not():
    """The issue's degenerate case: at 2 prompts the t quantile is 12.7, so unless the gap is far clear of its
    noise the ratio is unbounded (the percentile bootstrap gave an interval excluding 0 here)."""
    r = ratio_test([-0.5, -0.2], [1.5, 3.0])
    assert r.kind != "bounded" and r.p >= 0.05 and r.low == -np.inf and r.high == np.inf
    lo, hi, kind = fieller_interval([1.0], [2.0])
    assert (lo, hi, kind) == (-np.inf, np.inf, "unbounded")


def test_degenerate_samples_give_no_nan():
    zero = ratio_test(np.zeros(8), np.arange(1.0, 9.0))
    assert zero.estimate == 0 and zero.p == 1 and zero.low == zero.high == 0 and zero.se == 0
    same = ratio_test(np.full(8, 2.0), np.full(8, 4.0))  # no variance at all: the ratio is known
    assert same.estimate == 0.5 and same.p == 0 and same.low == pytest.approx(0.5) and same.high == pytest.approx(0.5)
    gapless = ratio_test([1.0, 2.0, 3.0], [1.0, -1.0, 0.0])
    assert np.isnan(gapless.estimate) and gapless.p == 1 and gapless.kind != "bounded"
    with pytest.raises(ValueError, match="equal-length"):
        ratio_test([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        ratio_test([1.0, np.nan], [1.0, 2.0])
    with pytest.raises(ValueError, match="level"):
        fieller_interval([1.0, 2.0], [1.0, 2.0], level=1.5)


def test_the_delta_method_se_matches_the_spread_of_estimates_across_samples():
    rng = np.random.default_rng(4)
    est, ses = [], []
    for _ in range(3000):
        den = rng.normal(5.0, 1.0, 64)
        r = ratio_test(0.4 * den + rng.normal(size=64), den)
        est.append(r.estimate)
        ses.append(r.se)
    assert np.median(ses) == pytest.approx(np.std(est), rel=0.1)


def test_many_samples_at_once_equal_one_at_a_time_and_the_t_test():
    rng = np.random.default_rng(5)
    den = rng.normal(2.0, 1.0, (50, 8))
    num = 0.2 * den + rng.lognormal(0, 1, (50, 8)) - 1.5
    num[0] = 0.0
    num[1] = 3.0
    many = ratio_tests(num, den)
    for i in range(50):
        one = ratio_test(num[i], den[i])
        assert (one.low, one.high, one.kind) == (many["low"][i], many["high"][i], many["kind"][i])
        if i > 1:
            assert one.p == pytest.approx(ttest_1samp(num[i], 0.0).pvalue, rel=1e-10)
