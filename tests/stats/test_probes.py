"""Probes on direction vs magnitude (scikit-learn): each finds a label encoded only in what it sees."""

from __future__ import annotations

import numpy as np
import pytest

from tlgeo.stats.probes import fit_probe, probe_features


def _direction_only(n: int, d: int, seed: int):
    """Label in the direction (three class means on the sphere), norm random and independent."""
    g = np.random.default_rng(seed)
    y = g.integers(0, 3, n)
    means = np.random.default_rng(99).normal(size=(3, d))  # the same classes in every split
    u = means[y] + 0.5 * g.normal(size=(n, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    return u * g.lognormal(1.0, 0.8, size=(n, 1)), y


def _magnitude_only(n: int, d: int, seed: int):
    """Label in the norm (1, 3 or 9, 10 % noise), direction uniform on the sphere."""
    g = np.random.default_rng(seed)
    y = g.integers(0, 3, n)
    u = g.normal(size=(n, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    return u * (3.0**y * (1 + 0.1 * g.normal(size=n)))[:, None], y


def test_features_split_direction_and_norm():
    h = np.array([[3.0, 4.0], [0.0, 0.0]])
    np.testing.assert_allclose(probe_features(h, "magnitude"), [[5.0], [0.0]])
    np.testing.assert_allclose(probe_features(h, "direction"), [[0.6, 0.8], [0.0, 0.0]])  # zero state: no NaN
    np.testing.assert_allclose(probe_features(h, "both"), [[0.6, 0.8, 5.0], [0.0, 0.0, 0.0]])
    assert probe_features(h.astype(np.float16), "direction").dtype == np.float64


@pytest.mark.parametrize(
    "make, sees, blind", [(_direction_only, "direction", "magnitude"), (_magnitude_only, "magnitude", "direction")]
)
def test_a_probe_finds_the_label_only_where_it_is_encoded(make, sees, blind):
    xtr, ytr = make(600, 16, 0)
    xte, yte = make(300, 16, 1)
    hit = fit_probe(probe_features(xtr, sees), ytr, probe_features(xte, sees), yte)
    miss = fit_probe(probe_features(xtr, blind), ytr, probe_features(xte, blind), yte)
    both = fit_probe(probe_features(xtr, "both"), ytr, probe_features(xte, "both"), yte)
    assert hit.score > 0.9 and both.score > 0.85
    assert miss.score < 0.5  # chance is 1/3
    assert abs(hit.baseline - np.mean(yte == np.bincount(ytr).argmax())) < 1e-12
    assert hit.ci_low <= hit.score <= hit.ci_high


def test_regression_probe_reads_depth_from_the_norm():
    g = np.random.default_rng(0)
    u = g.normal(size=(800, 8))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    depth = g.integers(0, 6, 800).astype(float)
    h = u * (1.0 + depth)[:, None]
    tr, te = slice(0, 500), slice(500, None)
    mag = fit_probe(
        probe_features(h[tr], "magnitude"), depth[tr], probe_features(h[te], "magnitude"), depth[te], task="regress"
    )
    dirn = fit_probe(
        probe_features(h[tr], "direction"), depth[tr], probe_features(h[te], "direction"), depth[te], task="regress"
    )
    assert mag.score > 0.99 and dirn.score < 0.1
    assert abs(mag.baseline) < 0.05  # the training mean explains nothing of held-out depth


def test_bootstrap_resamples_groups():
    xtr, ytr = _direction_only(300, 8, 0)
    xte, yte = _direction_only(200, 8, 1)
    per_item = fit_probe(xtr, ytr, xte, yte, n_boot=300)
    one_group = fit_probe(xtr, ytr, xte, yte, n_boot=300, groups=np.zeros(200))
    assert one_group.ci_low == one_group.ci_high == one_group.score  # a single unit: nothing to resample
    assert per_item.ci_high > per_item.ci_low


def test_bad_probe_input_fails_clearly():
    x, y = _direction_only(20, 4, 0)
    with pytest.raises(ValueError, match="unknown probe features 'norm'"):
        probe_features(x, "norm")
    with pytest.raises(ValueError, match=r"must be \[n, d\]"):
        probe_features(x[0], "direction")
    with pytest.raises(ValueError, match="unknown probe task"):
        fit_probe(x, y, x, y, task="cluster")
    with pytest.raises(ValueError, match="single class"):
        fit_probe(x, np.zeros(20), x, y)
    with pytest.raises(ValueError, match="differ in length"):
        fit_probe(x, y[:5], x, y)
    with pytest.raises(ValueError, match="groups has 3 entries"):
        fit_probe(x, y, x, y, groups=np.zeros(3))


def test_r2_is_sklearns():
    from sklearn.metrics import r2_score

    from tlgeo.stats.probes import _score

    rng = np.random.default_rng(0)
    y, pred = rng.normal(size=40), rng.normal(size=40)
    assert _score("regress", y, pred) == pytest.approx(r2_score(y, pred), abs=1e-12)
    assert _score("regress", y, y) == 1.0
