"""Exact k-nearest neighbours of token states, chunked and memory-bounded (torch only).

:func:`knn` ranks squared Euclidean distances ``||a||² + ||b||² - 2 a·b`` one
block of ``chunk`` queries at a time (``chunk x N`` distances in memory, never
``N x N``), leave-one-out (a query is never its own neighbour) and, with
``groups``, optionally excluding every token of the query's own group (its
sequence), so that a local fit cannot borrow the query's context.

``backend="faiss"`` runs the same exact search with faiss-cpu (``IndexFlatL2``,
an optional extra: ``pip install faiss-cpu``); it asks faiss for enough extra
neighbours to drop the excluded ones and returns the same result.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

from .parallel import compute_dtype
from ..errors import InputError

__all__ = ["knn", "max_neighbours"]


def max_neighbours(n: int, groups: Int[Tensor, "n"] | None = None, exclude_group: bool = False) -> int:
    """The largest ``k`` every query can have: ``n - 1``, or ``n`` minus the largest group."""
    if exclude_group:
        if groups is None:
            raise InputError("exclude_group needs groups (the sequence of each token)")
        return n - int(torch.bincount(groups - groups.min()).max())
    return n - 1


def knn(
    x: Float[Tensor, "n d"],
    k: int,
    *,
    queries: Int[Tensor, "q"] | None = None,
    groups: Int[Tensor, "n"] | None = None,
    exclude_group: bool = False,
    chunk: int = 1024,
    backend: str = "torch",
) -> tuple[Float[Tensor, "q k"], Int[Tensor, "q k"]]:
    """``(distances, indices)`` of the ``k`` nearest pool points of each query, nearest first.

    ``queries``: indices into ``x`` (default: every point). The query itself is
    always excluded; ``exclude_group`` also excludes the points with the query's
    ``groups`` value. Distances are Euclidean, in float32 (float64 for float64 input).
    """
    if x.ndim != 2:
        raise InputError(f"the pool must be [n, d], got shape {tuple(x.shape)}")
    n = x.shape[0]
    if groups is not None and groups.shape != (n,):
        raise InputError(f"groups must have one entry per pool point ({n}), got shape {tuple(groups.shape)}")
    if exclude_group and groups is not None and int(groups.unique().numel()) < 2:
        raise InputError("exclude_group with a pool of a single sequence leaves no neighbour")
    limit = max_neighbours(n, groups, exclude_group)
    if not isinstance(k, int) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    if k > limit:
        raise InputError(
            f"k={k} neighbours asked, but a query has at most {limit} in a pool of {n}"
            + (" outside its own sequence" if exclude_group else "")
        )
    if chunk < 1:
        raise InputError(f"chunk must be positive, got {chunk}")
    if backend == "faiss":
        return _knn_faiss(x, k, queries, groups if exclude_group else None, chunk)
    if backend != "torch":
        raise InputError(f"unknown kNN backend {backend!r}; choose torch or faiss")
    dt = compute_dtype(x)
    xp = x.to(dt)
    sq = (xp * xp).sum(-1)
    q_idx = torch.arange(n, device=x.device) if queries is None else queries.to(x.device)
    members = _group_members(groups) if exclude_group else None
    dists, idxs = [], []
    for s in range(0, len(q_idx), chunk):
        qi = q_idx[s : s + chunk]
        rows = torch.arange(len(qi), device=x.device)
        # ||b||² - 2 a·b ranks the pool like the squared distance (||a||² is the same along a row)
        d2 = torch.addmm(sq[None, :], xp[qi], xp.T, alpha=-2)  # [c, n]
        d2[rows, qi] = float("inf")
        if members is not None:
            m = members[groups[qi] - groups.min()]  # [c, largest group], padded with the query itself
            m = torch.where(m < 0, qi[:, None], m)
            d2.scatter_(1, m, float("inf"))
        val, ind = torch.topk(d2, k, dim=1, largest=False)
        dists.append((val + sq[qi, None]).clamp_min(0).sqrt())
        idxs.append(ind)
    return torch.cat(dists), torch.cat(idxs)


def _group_members(groups: Tensor) -> Tensor:
    """``[n_groups, largest group]`` pool indices of each group's members, padded with -1."""
    g = groups - groups.min()
    order = torch.argsort(g, stable=True)
    counts = torch.bincount(g)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(len(g), device=g.device) - starts[g[order]]
    out = torch.full((len(counts), int(counts.max())), -1, dtype=torch.long, device=g.device)
    out[g[order], rank] = order
    return out


def _knn_faiss(x: Tensor, k: int, queries: Tensor | None, groups: Tensor | None, chunk: int):
    """Exact kNN with faiss ``IndexFlatL2`` (float32), the query (and its group) removed."""
    try:
        import faiss
    except ImportError as e:
        raise ImportError("backend='faiss' needs faiss-cpu (pip install faiss-cpu)") from e
    import numpy as np

    xs = np.ascontiguousarray(x.detach().float().cpu().numpy())
    index = faiss.IndexFlatL2(xs.shape[1])
    index.add(xs)
    q_idx = np.arange(len(xs)) if queries is None else queries.cpu().numpy()
    g = None if groups is None else groups.cpu().numpy()
    extra = 1 + (int(np.bincount(g - g.min()).max()) if g is not None else 0)
    dists, idxs = [], []
    for s in range(0, len(q_idx), chunk):
        qi = q_idx[s : s + chunk]
        d2, ind = index.search(xs[qi], min(k + extra, len(xs)))
        bad = ind == qi[:, None]
        if g is not None:
            bad |= g[ind] == g[qi][:, None]
        d2 = np.where(bad, np.inf, d2)
        order = np.argsort(d2, axis=1, kind="stable")[:, :k]
        dists.append(np.sqrt(np.maximum(np.take_along_axis(d2, order, 1), 0)))
        idxs.append(np.take_along_axis(ind, order, 1))
    return torch.from_numpy(np.concatenate(dists)), torch.from_numpy(np.concatenate(idxs)).long()
