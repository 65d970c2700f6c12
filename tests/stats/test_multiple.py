"""Wald p-values from a bootstrap SE and Benjamini-Hochberg q-values (tlgeo.stats.multiple), and the p-values
of spearman_matrix."""

import numpy as np
import pytest
from scipy.stats import false_discovery_control, norm

from tlgeo.stats.correlation import spearman_matrix
from tlgeo.stats.multiple import bh_qvalues, wald_pvalue
from tlgeo.stats.resampling import benjamini_hochberg


def test_bh_is_scipys_and_q_is_at_least_p_and_monotone():
    p = np.random.default_rng(0).uniform(size=200) ** 3
    q = bh_qvalues(p)
    np.testing.assert_allclose(q, false_discovery_control(p, method="bh"), rtol=1e-12)
    np.testing.assert_allclose(q, benjamini_hochberg(p), rtol=1e-12)  # the older hand-written BH agrees
    assert q.dtype == np.float64 and (q >= p - 1e-15).all() and (q <= 1).all()
    order = np.argsort(p)
    assert (np.diff(q[order]) >= -1e-15).all()  # a smaller p never gets a larger q
    # NaN stays NaN and is left out of the family; the shape is kept
    p2 = np.array([[0.01, np.nan], [0.04, 0.03]])
    q2 = bh_qvalues(p2)
    assert q2.shape == (2, 2) and np.isnan(q2[0, 1])
    np.testing.assert_allclose(q2[~np.isnan(p2)], false_discovery_control([0.01, 0.04, 0.03]))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        bh_qvalues([0.5, 1.5])


def test_wald_pvalue_is_the_normal_two_sided_p():
    est, se = np.array([1.96, -0.5, 0.0, 3.0]), np.array([1.0, 0.25, 0.1, 2.0])
    np.testing.assert_allclose(wald_pvalue(est, se), 2 * norm.sf(np.abs(est) / se), rtol=1e-12)
    assert wald_pvalue(1.96, 1.0) == pytest.approx(0.05, abs=1e-3)
    # never NaN: an undefined estimate or SE is p = 1; a zero SE is p = 0 unless the estimate is 0
    np.testing.assert_array_equal(wald_pvalue([np.nan, 0.3, 0.3, 0.0], [0.1, np.nan, 0.0, 0.0]), [1, 1, 0, 1])
    with pytest.raises(ValueError, match=">= 0"):
        wald_pvalue(0.1, -1.0)


def test_spearman_matrix_p_values():
    rng = np.random.default_rng(0)
    window = np.repeat(np.arange(30), 8)
    a = rng.normal(size=240)
    x = np.column_stack([a, a + rng.normal(size=240), rng.normal(size=240), np.ones(240)])
    m = spearman_matrix(x, groups=window, n_boot=100)
    assert m["p"].dtype == np.float64 and not np.isnan(m["p"]).any()
    from scipy.stats import t

    np.testing.assert_allclose(
        m["p"][:3, :3], 2 * t.sf(np.abs(m["rho"][:3, :3]) / m["se"][:3, :3], 29), rtol=1e-9, atol=1e-300
    )  # Student's t over the 30 windows; diagonal: rho 1 and SE 0, p 0
    assert m["p"][0, 1] < 1e-6 and (m["p"][3, :3] == 1).all()  # a constant column: rho undefined, p = 1
    # under the null the 5% test rejects about 5% of the time (the SE is the bootstrap's, not its variance)
    # (about 5% at n_boot=200 with 20 windows; a little more with this test's few resamples)
    hits = 0
    for s in range(100):
        g = np.random.default_rng(s)
        hits += spearman_matrix(g.normal(size=(50, 2)), n_boot=30, n_shuffle=1, seed=s)["p"][0, 1] < 0.05
    assert 0.0 < hits / 100 < 0.15


def test_a_small_sample_gets_students_t_and_the_t_test_of_its_mean():
    from scipy.stats import t, ttest_1samp

    from tlgeo.stats.multiple import mean_test_pvalue, significant_digits

    assert wald_pvalue(5.0, 1.0, df=9) == pytest.approx(2 * t.sf(5.0, 9), rel=1e-12)
    assert wald_pvalue(5.0, 1.0, df=9) > 1000 * wald_pvalue(5.0, 1.0)  # 7.4e-4 against 5.7e-7
    assert wald_pvalue(5.0, 1.0, df=0) == 1  # one unit: no test
    x = np.array([0.9, 1.1, 1.3, 0.7, 1.0, 1.2, 0.8, 1.05])
    assert mean_test_pvalue(x) == pytest.approx(ttest_1samp(x, 0.0).pvalue, rel=1e-12)
    assert mean_test_pvalue([1.0]) == 1 and mean_test_pvalue([0.0, 0.0]) == 1 and mean_test_pvalue([2.0, 2.0]) == 0
    assert mean_test_pvalue([1.0, np.nan, 2.0]) == 1
    np.testing.assert_array_equal(
        significant_digits([0.012345, 1.03e-300, 0.0, np.nan, 1.0, 0.996]), [0.012, 1e-300, 0.0, np.nan, 1.0, 1.0]
    )


def test_partial_spearman_ci_decides_whether_a_control_explains_a_relation():
    from tlgeo.stats.correlation import partial_spearman, partial_spearman_ci

    rng = np.random.default_rng(0)
    window = np.repeat(np.arange(40), 10)
    z = rng.normal(size=400)  # a common cause
    own = rng.normal(size=400)
    x = np.column_stack(
        [z + 0.3 * rng.normal(size=400), z + 0.3 * rng.normal(size=400), own, own + 0.5 * rng.normal(size=400)]
    )
    got = partial_spearman_ci(x, z[:, None], groups=window, n_boot=100, seed=1)
    np.testing.assert_array_equal(got["partial"], partial_spearman(x, z[:, None]))
    assert got["low"][0, 1] < 0 < got["high"][0, 1] and got["p"][0, 1] > 0.05  # explained by z: vanishes
    assert got["low"][2, 3] > 0.5 and got["p"][2, 3] < 1e-6  # a relation of its own survives
    assert (got["low"] <= got["partial"] + 1e-12).all() and (got["partial"] <= got["high"] + 1e-12).all()
    again = partial_spearman_ci(x, z[:, None], groups=window, n_boot=100, seed=1)
    np.testing.assert_array_equal(again["low"], got["low"])  # the same resamples for the same seed
