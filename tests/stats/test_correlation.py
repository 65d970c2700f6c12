"""Spearman's rho with a bootstrap CI on constructed data."""

import numpy as np
import pytest

from tlgeo.stats.correlation import spearman_ci


def test_monotone_independent_and_noisy():
    g = np.random.default_rng(0)
    x = g.normal(size=300)
    assert spearman_ci(x, np.exp(x), n_boot=200).rho == pytest.approx(1.0)  # any increasing map: rho 1
    assert spearman_ci(x, -x**3, n_boot=200).rho == pytest.approx(-1.0)
    ind = spearman_ci(x, g.normal(size=300), n_boot=500)
    assert ind.ci_low < 0 < ind.ci_high and abs(ind.rho) < 0.15
    noisy = spearman_ci(x, x + g.normal(size=300), n_boot=500)
    assert 0.5 < noisy.ci_low < noisy.rho < noisy.ci_high < 0.9


def test_group_bootstrap_is_wider_when_groups_are_correlated():
    g = np.random.default_rng(1)
    shared = np.repeat(g.normal(size=20), 15)  # 20 groups of 15 items sharing most of their value
    x = shared + 0.1 * g.normal(size=300)
    y = shared + 0.3 * g.normal(size=300)  # the correlation lives between groups
    items = spearman_ci(x, y, n_boot=400)
    grouped = spearman_ci(x, y, groups=np.repeat(np.arange(20), 15), n_boot=400)
    assert grouped.rho == items.rho
    assert grouped.ci_high - grouped.ci_low > items.ci_high - items.ci_low


def test_bad_input():
    with pytest.raises(ValueError, match="at least 3"):
        spearman_ci([1, 2], [1, 2])
    with pytest.raises(ValueError, match="same length"):
        spearman_ci([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="finite"):
        spearman_ci([1, 2, np.nan], [1, 2, 3])
    assert np.isnan(spearman_ci([1, 1, 1], [1, 2, 3], n_boot=10).rho)  # constant: undefined, not an error
