"""Chunked exact kNN: equal to brute force, leave-one-out, same-sequence exclusion, clear errors."""

import pytest
import torch

from tlgeo.geometry.neighbours import knn, max_neighbours


def _pool(n=300, d=12, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_chunked_equals_brute_force():
    x = _pool()
    d, i = knn(x, 7, chunk=37)
    full = torch.cdist(x, x)
    full.fill_diagonal_(float("inf"))
    want_d, want_i = full.topk(7, largest=False)
    assert torch.equal(i, want_i)
    torch.testing.assert_close(d, want_d, rtol=1e-9, atol=1e-9)
    d1, i1 = knn(x, 7, chunk=10_000)
    assert torch.equal(i1, i) and (d[:, 1:] >= d[:, :-1]).all()  # nearest first


def test_leave_one_out_and_same_sequence_exclusion():
    x = _pool(60, 4)
    x[1] = x[0]  # a duplicate: distance 0, but never the query itself
    _, i = knn(x, 3)
    assert not (i == torch.arange(60)[:, None]).any()
    assert i[0, 0] == 1 and i[1, 0] == 0
    groups = torch.arange(60) // 10
    _, ig = knn(x, 5, groups=groups, exclude_group=True)
    assert not (groups[ig] == groups[:, None]).any()
    _, iq = knn(x, 3, queries=torch.tensor([5, 7]))
    assert torch.equal(iq, i[[5, 7]])


def test_bad_input():
    x = _pool(20, 3)
    groups = torch.arange(20) // 5
    assert max_neighbours(20) == 19 and max_neighbours(20, groups, True) == 15
    with pytest.raises(ValueError, match="k=20 neighbours asked, but a query has at most 19"):
        knn(x, 20)
    with pytest.raises(ValueError, match="at most 15 in a pool of 20 outside its own sequence"):
        knn(x, 16, groups=groups, exclude_group=True)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        knn(x, 0)
    with pytest.raises(ValueError, match="single sequence"):
        knn(x, 2, groups=torch.zeros(20, dtype=torch.long), exclude_group=True)
    with pytest.raises(ValueError, match="needs groups"):
        knn(x, 2, exclude_group=True)
    with pytest.raises(ValueError, match=r"must be \[n, d\]"):
        knn(x[0], 2)


def test_faiss_backend_gives_the_same_neighbours():
    pytest.importorskip("faiss")
    x = _pool(400, 16).float()
    groups = torch.arange(400) // 20
    for kw in ({}, {"groups": groups, "exclude_group": True}):
        d_t, i_t = knn(x, 9, chunk=64, **kw)
        d_f, i_f = knn(x, 9, chunk=64, backend="faiss", **kw)
        assert (i_t == i_f).float().mean() > 0.999  # float32 ties aside
        torch.testing.assert_close(d_f, d_t.float(), rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="unknown kNN backend"):
        knn(x, 3, backend="annoy")


def test_same_sequence_exclusion_with_unordered_uneven_groups():
    x = _pool(90, 5)
    groups = torch.randint(0, 7, (90,), generator=torch.Generator().manual_seed(1)) + 3  # not contiguous, not 0-based
    _, i = knn(x, 4, groups=groups, exclude_group=True, chunk=13)
    full = torch.cdist(x, x)
    full[groups[:, None] == groups[None, :]] = float("inf")
    assert torch.equal(i, full.topk(4, largest=False).indices)
