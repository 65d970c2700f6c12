"""Properties of what the patching effects' p- and q-values are made of: BH q-values (scipy) on random
families, the Wald p, and the SE of the ratio bootstrap (fixed cases of the first two: test_multiple.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import false_discovery_control, norm

from tlgeo.stats.multiple import bh_qvalues, wald_pvalue
from tlgeo.stats.resampling import ratio_bootstrap, ratio_ci

pvals = st.lists(st.floats(0, 1, allow_nan=False), min_size=1, max_size=60)


@settings(max_examples=80, deadline=None)
@given(pvals)
def test_bh_qvalues_match_scipy_and_are_at_least_p_and_monotone(p):
    p = np.array(p)
    q = bh_qvalues(p)
    assert q.dtype == np.float64 and q.shape == p.shape
    np.testing.assert_allclose(q, false_discovery_control(p, method="bh"), rtol=1e-12, atol=0)
    assert np.all(q >= p - 1e-15) and np.all((q >= 0) & (q <= 1))
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(q[order]) >= -1e-15)  # a smaller p never gets a larger q
    perm = np.random.default_rng(0).permutation(p.size)
    np.testing.assert_allclose(bh_qvalues(p[perm]), q[perm])  # the family is a set: order does not matter


@settings(max_examples=60, deadline=None)
@given(st.floats(-50, 50, allow_nan=False), st.floats(1e-6, 50, allow_nan=False))
def test_wald_pvalue_is_the_two_sided_normal_tail(est, se):
    p = wald_pvalue(est, se)
    assert 0 <= p <= 1
    assert p == pytest.approx(2 * norm.sf(abs(est) / se), rel=1e-12, abs=1e-300)
    assert wald_pvalue(2 * est, se) <= p + 1e-15  # farther from 0 in SEs: smaller p


def test_ratio_bootstrap_gives_ratio_ci_bounds_and_an_se():
    rng = np.random.default_rng(3)
    num, den = rng.normal(1, 1, 30), rng.normal(2, 0.2, 30)
    b = ratio_bootstrap(num, den, n_boot=400, seed=7)
    assert (b.low, b.high) == ratio_ci(num, den, n_boot=400, seed=7)  # the same resamples
    # the SE of a ratio of means is about the delta method's
    r = num.sum() / den.sum()
    delta = np.std(num - r * den, ddof=1) / np.sqrt(num.size) / den.mean()
    assert b.se == pytest.approx(delta, rel=0.25)
    const = ratio_bootstrap(2 * den, den, n_boot=50)  # every resample gives 2 exactly
    assert const.se == 0.0 and const.low == const.high == 2.0
    assert np.isnan(ratio_bootstrap([1.0], [0.0], n_boot=20).se)  # no defined resample
