"""How folded a point cloud is: curvature ratio, local vs global participation ratio, TwoNN dimension.

Points are rows of ``x [n, d]`` (e.g. the states' coordinates inside one subspace).

* :func:`curvature_ratio`: mean distance to the ``k`` nearest neighbours over the mean
  pairwise distance (the authors' "curvature ratio", ``k = 8``): small when the cloud
  is locally thin relative to its extent;
* :func:`local_global_pr`: the participation ratio of the whole cloud's covariance and the
  mean over points of the PR of each ``k``-neighbourhood's covariance;
* :func:`twonn_dimension`: TwoNN intrinsic dimension (scikit-dimension's ``TwoNN``) from
  each point's first and second neighbour distances computed here.
"""

from __future__ import annotations

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from .parallel import compute_dtype
from .subspaces import participation_ratio
from ..errors import InputError

__all__ = ["pairwise_distances", "curvature_ratio", "local_global_pr", "twonn_dimension"]


def pairwise_distances(x: Float[Tensor, "n d"]) -> Float[Tensor, "n n"]:
    """Euclidean distances between all rows (float64; zero diagonal)."""
    x = x.to(torch.float64)
    d = torch.cdist(x, x)
    d.fill_diagonal_(0)
    return d


def _check(x: Tensor, k: int) -> None:
    if x.ndim != 2:
        raise InputError(f"points must be [n, d], got shape {tuple(x.shape)}")
    if not 1 <= k < x.shape[0]:
        raise InputError(f"k={k} neighbours need 1 <= k < n={x.shape[0]} points")


def curvature_ratio(x: Float[Tensor, "n d"], k: int = 8) -> float:
    """Mean ``k``-NN distance / mean pairwise distance (0 when all points coincide)."""
    _check(x, k)
    d = pairwise_distances(x)
    n = len(d)
    mean_pair = float(d.sum() / (n * (n - 1)))
    if mean_pair == 0:
        return 0.0
    d.fill_diagonal_(float("inf"))
    knn = d.topk(k, dim=1, largest=False).values
    return float(knn.mean()) / mean_pair


def local_global_pr(x: Float[Tensor, "n d"], k: int = 16) -> tuple[float, float]:
    """``(local, global)`` participation ratios: the mean over points of the PR of the covariance of
    the point and its ``k`` nearest neighbours, and the PR of the whole cloud's covariance."""
    _check(x, k)
    x = x.to(compute_dtype(x))
    glob = float(participation_ratio(torch.linalg.svdvals(x - x.mean(0)) ** 2))
    d = pairwise_distances(x)
    d.fill_diagonal_(-1.0)  # each point first in its own neighbourhood
    idx = d.topk(k + 1, dim=1, largest=False).indices
    nb = x[idx]  # [n, k + 1, d]
    spec = torch.linalg.svdvals(nb - nb.mean(1, keepdim=True)) ** 2
    return float(participation_ratio(spec).mean()), glob


def twonn_dimension(x: Float[Tensor, "n d"], discard_fraction: float = 0.1) -> float:
    """TwoNN intrinsic dimension (scikit-dimension), fitted on the neighbour distances computed here;
    NaN when fewer than 3 points have a non-zero nearest-neighbour distance (repeated states)."""
    _check(x, 2)
    import warnings

    from skdim.id import TwoNN

    d = pairwise_distances(x)
    d.fill_diagonal_(float("inf"))
    r = d.topk(2, dim=1, largest=False).values.numpy()  # [n, 2]: first and second neighbour
    r = r[r[:, 0] > 0]
    if len(r) < 3:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(TwoNN(discard_fraction=discard_fraction, dist=True).fit(np.ascontiguousarray(r)).dimension_)
