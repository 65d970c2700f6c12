"""Group discrimination on constructed groups: sign of the silhouette, cosine gap against shuffles,
principal angles."""

import numpy as np
import pytest

from tlgeo.stats.discrimination import cosine_gap, cosine_gap_test, group_angles, silhouette


def _groups(separated: bool, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, 10)) * (5 if separated else 0)
    labels = np.repeat(np.arange(4), 25)
    return centres[labels] + rng.normal(size=(100, 10)), labels


def test_separated_groups_discriminate_and_shuffled_ones_do_not():
    x, labels = _groups(True)
    assert silhouette(x, labels) > 0.3 and cosine_gap(x, labels) > 0.3
    t = cosine_gap_test(x, labels, n_shuffles=50)
    assert t.cohens_d > 10 and t.p_value == pytest.approx(1 / 51)
    noise, labels = _groups(False)
    assert abs(cosine_gap_test(noise, labels, n_shuffles=50).cohens_d) < 4


def test_anti_discriminative_groups_have_a_negative_silhouette():
    # each group spread along its own ring, the rings interleaved: points are nearer other groups
    labels = np.tile(np.arange(2), 50)
    t = np.linspace(0, 2 * np.pi, 100, endpoint=False)
    x = np.stack([np.cos(t), np.sin(t)], 1) * np.where(labels == 0, 1.0, 1.02)[:, None]
    x = x[np.argsort(t)]
    shuffled = np.where(np.arange(100) % 2 == 0, 0, 1)
    assert silhouette(x, shuffled, metric="euclidean") < 0


def test_group_angles():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(40, 3)) @ np.eye(3, 8)
    assert np.allclose(group_angles(a, a + 1e-9 * rng.normal(size=a.shape), k=3), 0, atol=1e-3)
    b = rng.normal(size=(40, 3)) @ np.eye(8)[3:6]
    assert np.allclose(group_angles(a, b, k=3), 90)
    with pytest.raises(ValueError, match="at least two groups"):
        silhouette(a, np.zeros(40))
    with pytest.raises(ValueError, match="k=5 axes asked of a group of 40 points in 3"):
        group_angles(rng.normal(size=(40, 3)), a, k=5)


def test_one_point_per_group_is_a_clear_error():
    x = np.eye(4)
    with pytest.raises(ValueError, match="a silhouette of 4 groups needs more than 4 points"):
        silhouette(x, np.arange(4))
