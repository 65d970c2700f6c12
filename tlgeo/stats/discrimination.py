"""Do prompt groups separate inside a subspace? Silhouette, cosine gap against shuffles, principal angles.

* :func:`silhouette`: scikit-learn's silhouette score of the group labels (cosine or
  Euclidean): negative means points sit closer to other groups than to their own
  (anti-discriminative);
* :func:`cosine_gap`: mean within-group minus mean between-group cosine similarity of
  the (optionally centred) points; :func:`cosine_gap_test` sets it against label
  shuffles: Cohen's ``d = (gap - mean_shuffled) / sd_shuffled`` and a permutation p-value;
* :func:`group_angles`: principal angles (degrees, scipy) between two groups' top-``k``
  PCA subspaces.
"""

from __future__ import annotations

from ..errors import InputError
from dataclasses import dataclass

import numpy as np

__all__ = ["silhouette", "cosine_gap", "GapTest", "cosine_gap_test", "group_angles"]


def _arrays(x, labels) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64)
    labels = np.asarray(labels)
    if x.ndim != 2 or len(x) != len(labels):
        raise InputError(f"points must be [n, d] with one label each, got {x.shape} and {labels.shape}")
    if len(np.unique(labels)) < 2:
        raise InputError("group discrimination needs at least two groups")
    return x, labels


def silhouette(x, labels, metric: str = "cosine") -> float:
    """Silhouette score of ``labels`` on the rows of ``x`` (scikit-learn)."""
    from sklearn.metrics import silhouette_score

    x, labels = _arrays(x, labels)
    n_groups = len(np.unique(labels))
    if n_groups >= len(x):
        raise InputError(
            f"a silhouette of {n_groups} groups needs more than {n_groups} points (got {len(x)}): "
            "give at least two per group"
        )
    return float(silhouette_score(x, labels, metric=metric))


def _cosines(x: np.ndarray, center: bool) -> np.ndarray:
    if center:
        x = x - x.mean(0)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    u = np.divide(x, n, out=np.zeros_like(x), where=n > 0)
    return u @ u.T


def _gap(cos: np.ndarray, labels: np.ndarray) -> float:
    same = labels[:, None] == labels[None, :]
    off = ~np.eye(len(labels), dtype=bool)
    return float(cos[same & off].mean() - cos[~same].mean())


def cosine_gap(x, labels, center: bool = True) -> float:
    """Mean cosine of pairs in the same group minus mean cosine of pairs in different groups."""
    x, labels = _arrays(x, labels)
    return _gap(_cosines(x, center), labels)


@dataclass
class GapTest:
    """The observed cosine gap, Cohen's d against label shuffles, and the permutation p-value."""

    gap: float
    cohens_d: float
    p_value: float
    n_shuffles: int


def cosine_gap_test(x, labels, n_shuffles: int = 20, seed: int = 0, center: bool = True) -> GapTest:
    """:func:`cosine_gap` against ``n_shuffles`` random relabellings (the authors: 20)."""
    if n_shuffles < 2:
        raise InputError(f"n_shuffles must be at least 2, got {n_shuffles}")
    x, labels = _arrays(x, labels)
    cos = _cosines(x, center)
    obs = _gap(cos, labels)
    rng = np.random.default_rng(seed)
    null = np.array([_gap(cos, rng.permutation(labels)) for _ in range(n_shuffles)])
    sd = null.std(ddof=1)
    d = (obs - null.mean()) / sd if sd > 0 else 0.0
    p = (1 + int((null >= obs).sum())) / (1 + n_shuffles)
    return GapTest(obs, float(d), float(p), n_shuffles)


def group_angles(a, b, k: int = 4, center: bool = True) -> np.ndarray:
    """Principal angles (degrees, ascending) between the top-``k`` PCA subspaces of two point sets."""
    from scipy.linalg import subspace_angles

    bases = []
    for x in (a, b):
        x = np.asarray(x, dtype=np.float64)
        if center:
            x = x - x.mean(0)
        if not 1 <= k <= min(x.shape):
            raise InputError(f"k={k} axes asked of a group of {x.shape[0]} points in {x.shape[1]} dimensions")
        _, _, vt = np.linalg.svd(x, full_matrices=False)
        bases.append(vt[:k].T)
    return np.sort(np.degrees(subspace_angles(*bases)))
