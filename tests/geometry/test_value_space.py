"""Tests for ``tlgeo.geometry.value_space`` (spec A, section 2: value-space sites and Diag. Rem.).

Brute force with explicit Python loops over (batch, query, head) on random causal
softmax patterns, with grouped-query attention and the KV-cache case (q < k,
query ``i`` at key ``i + k - q``).
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tlgeo.geometry.value_space import (
    expand_kv,
    kv_head_index,
    remove_diagonal,
    scale_diagonal,
    self_message,
    self_weights,
    split_self,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def causal_pattern(b, h, q, k, seed=0, temp=3.0, dtype=torch.float64):
    """Random causal softmax pattern ``[b, h, q, k]``; query ``i`` sees keys ``<= i + k - q``.

    Logits lie in ``[-temp, temp]``, so with ``temp <= 5`` every visible key has weight
    at least ``e^-10 / k`` (well above the renormalisation threshold).
    """
    g = torch.Generator().manual_seed(seed)
    logits = (torch.rand(b, h, q, k, generator=g, dtype=torch.float64) * 2 - 1) * temp
    self_key = torch.arange(q) + (k - q)
    future = torch.arange(k)[None, :] > self_key[:, None]
    return logits.masked_fill(future, float("-inf")).softmax(-1).to(dtype)


@st.composite
def pattern_args(draw):
    b = draw(st.integers(1, 2))
    h = draw(st.integers(1, 3))
    q = draw(st.integers(1, 6))
    k = q + draw(st.integers(0, 3))
    seed = draw(st.integers(0, 2**31 - 1))
    temp = draw(st.floats(0.0, 5.0))
    return b, h, q, k, seed, temp


# ---------------------------------------------------------------------------
# kv_head_index / expand_kv
# ---------------------------------------------------------------------------


def test_kv_head_index_values():
    assert kv_head_index(9, 3).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert kv_head_index(4, None).tolist() == [0, 1, 2, 3]
    assert kv_head_index(4).tolist() == [0, 1, 2, 3]
    assert kv_head_index(4, 4).tolist() == [0, 1, 2, 3]
    assert kv_head_index(4, 1).tolist() == [0, 0, 0, 0]
    assert kv_head_index(8, 2).tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert kv_head_index(4, 2).dtype == torch.long


@pytest.mark.parametrize("n_heads, n_kv", [(4, 3), (9, 2), (2, 4), (6, 4), (5, 10)])
def test_kv_head_index_not_divisible(n_heads, n_kv):
    with pytest.raises(ValueError):
        kv_head_index(n_heads, n_kv)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 8), st.integers(1, 6))
def test_kv_head_index_is_h_over_group(n_kv, group):
    n_heads = n_kv * group
    idx = kv_head_index(n_heads, n_kv)
    assert idx.tolist() == [h // (n_heads // n_kv) for h in range(n_heads)]
    assert torch.bincount(idx, minlength=n_kv).tolist() == [group] * n_kv


@pytest.mark.parametrize("n_heads, n_kv", [(4, 2), (6, 3), (6, 1), (8, 2), (3, 3)])
def test_expand_kv_matches_kv_head_index(n_heads, n_kv):
    g = torch.Generator().manual_seed(n_heads * 10 + n_kv)
    v = torch.randn(2, 5, n_kv, 3, generator=g, dtype=torch.float64)
    ev = expand_kv(v, n_heads)
    assert ev.shape == (2, 5, n_heads, 3)
    idx = kv_head_index(n_heads, n_kv)
    for h in range(n_heads):
        assert torch.equal(ev[..., h, :], v[..., int(idx[h]), :])
    if n_heads == n_kv:
        assert ev is v or torch.equal(ev, v)


def test_expand_kv_not_divisible():
    with pytest.raises(ValueError):
        expand_kv(torch.zeros(1, 2, 3, 4), 4)


# ---------------------------------------------------------------------------
# self_weights / self_message / split_self
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("q, k", [(5, 5), (1, 1), (2, 5), (1, 7), (4, 6)])
def test_self_weights_diagonal(q, k):
    b, h = 2, 3
    p = causal_pattern(b, h, q, k, seed=q * 100 + k)
    w = self_weights(p)
    assert w.shape == (b, q, h)
    for bi in range(b):
        for i in range(q):
            for hi in range(h):
                assert w[bi, i, hi] == p[bi, hi, i, i + k - q]
    # the last query always sees itself as the last visible key
    assert torch.all(w > 0)


def _brute_force_z(p, v, n_heads):
    """``z[b, t, h] = sum_s A[b, h, t, s] v[b, s, kv(h)]`` with plain loops."""
    b, _, q, k = p.shape
    n_kv = v.shape[2]
    z = torch.zeros(b, q, n_heads, v.shape[-1], dtype=torch.float64)
    for bi in range(b):
        for t in range(q):
            for h in range(n_heads):
                kv = h // (n_heads // n_kv)
                acc = torch.zeros(v.shape[-1], dtype=torch.float64)
                for s in range(k):
                    acc = acc + p[bi, h, t, s].double() * v[bi, s, kv].double()
                z[bi, t, h] = acc
    return z


@pytest.mark.parametrize("n_heads, n_kv", [(4, 2), (4, 4), (4, 1)])
@pytest.mark.parametrize("q, k", [(5, 5), (3, 6), (1, 4)])
def test_split_self_brute_force(n_heads, n_kv, q, k):
    b, d_head = 2, 3
    g = torch.Generator().manual_seed(7 * q + k + n_kv)
    p = causal_pattern(b, n_heads, q, k, seed=q + 31 * k)
    v = torch.randn(b, k, n_kv, d_head, generator=g, dtype=torch.float64)
    z = _brute_force_z(p, v, n_heads)
    d, c = split_self(z, p, v)
    assert d.shape == c.shape == z.shape
    torch.testing.assert_close(d, self_message(p, v), rtol=0, atol=0)
    for bi in range(b):
        for t in range(q):
            key = t + k - q
            for h in range(n_heads):
                kv = h // (n_heads // n_kv)
                want_d = p[bi, h, t, key] * v[bi, key, kv]
                torch.testing.assert_close(d[bi, t, h], want_d, rtol=1e-14, atol=1e-15)
                want_c = sum(
                    (p[bi, h, t, s] * v[bi, s, kv] for s in range(k) if s != key),
                    torch.zeros(d_head, dtype=torch.float64),
                )
                torch.testing.assert_close(c[bi, t, h], want_c, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(d + c, z, rtol=1e-14, atol=1e-14)


def test_self_message_float32_pattern_and_dtype():
    p = causal_pattern(1, 4, 3, 3, seed=3, dtype=torch.float32)
    v = torch.randn(1, 3, 2, 5, generator=torch.Generator().manual_seed(0))
    d = self_message(p, v)
    assert d.dtype == torch.float32 and d.shape == (1, 3, 4, 5)
    # head 3 reads KV head 1; query 2 is key 2
    torch.testing.assert_close(d[0, 2, 3], p[0, 3, 2, 2] * v[0, 2, 1])
    # the first query's self weight is 1 in a causal pattern without a cache
    torch.testing.assert_close(d[0, 0], expand_kv(v, 4)[0, 0])


# ---------------------------------------------------------------------------
# scale_diagonal / remove_diagonal
# ---------------------------------------------------------------------------


def _eye(q, k):
    self_key = torch.arange(q) + (k - q)
    return torch.arange(k)[None, :] == self_key[:, None], self_key


TOL = {torch.float64: 1e-12, torch.float32: 2e-6}


@SETTINGS
@given(pattern_args(), st.sampled_from([torch.float64, torch.float32]))
def test_remove_diagonal_properties(args, dtype):
    b, h, q, k, seed, temp = args
    p = causal_pattern(b, h, q, k, seed, temp, dtype)
    out = remove_diagonal(p)
    assert out.dtype == dtype and out.shape == p.shape
    assert torch.isfinite(out).all() and torch.all(out >= 0)
    tol = TOL[dtype]
    torch.testing.assert_close(out.sum(-1), torch.ones(b, h, q, dtype=dtype), rtol=0, atol=tol * k)
    eye, self_key = _eye(q, k)
    first = self_key == 0  # position 0 exists as a query only without a KV cache
    diag = out[..., eye].reshape(b, h, q)
    assert torch.all(diag[..., ~first] == 0)
    assert torch.equal(out[..., first, :], p[..., first, :])
    # future keys stay masked
    future = torch.arange(k)[None, :] > self_key[:, None]
    assert torch.all(out[..., future] == 0)
    # the same as scale 0
    assert torch.equal(out, scale_diagonal(p, 0.0))
    # and it is the renormalisation of the off-diagonal part
    off = p.double().masked_fill(eye, 0.0)
    want = off / off.sum(-1, keepdim=True)
    rows = ~first
    torch.testing.assert_close(out.double()[..., rows, :], want[..., rows, :], rtol=tol * 10, atol=tol)


@SETTINGS
@given(
    pattern_args(),
    st.sampled_from([torch.float64, torch.float32]),
    st.floats(min_value=1e-3, max_value=3.0),
)
def test_scale_diagonal_properties(args, dtype, s):
    b, h, q, k, seed, temp = args
    p = causal_pattern(b, h, q, k, seed, temp, dtype)
    out = scale_diagonal(p, s)
    assert out.dtype == dtype and out.shape == p.shape and torch.isfinite(out).all()
    tol = TOL[dtype]
    torch.testing.assert_close(out.sum(-1), torch.ones(b, h, q, dtype=dtype), rtol=0, atol=tol * k)
    eye, self_key = _eye(q, k)
    first = self_key == 0
    rows = ~first
    pd, od = p.double(), out.double()
    # new diagonal = s * old diagonal (row 0 kept)
    old_diag = pd[..., eye].reshape(b, h, q)
    new_diag = od[..., eye].reshape(b, h, q)
    torch.testing.assert_close(new_diag[..., rows], s * old_diag[..., rows], rtol=tol, atol=tol)
    assert torch.equal(out[..., first, :], p[..., first, :])
    # off-diagonal entries keep their proportions: new_off = factor * old_off per row
    off, new_off = pd.masked_fill(eye, 0.0), od.masked_fill(eye, 0.0)
    mass = off.sum(-1, keepdim=True)
    factor = (1.0 - s * old_diag.unsqueeze(-1)) / mass.clamp_min(1e-300)
    torch.testing.assert_close(
        new_off[..., rows, :], (factor * off)[..., rows, :], rtol=10 * tol, atol=10 * tol * max(1.0, s)
    )
    # a tensor scale does the same as the number
    torch.testing.assert_close(scale_diagonal(p, torch.tensor(s, dtype=torch.float64)), out, rtol=tol, atol=tol)


@SETTINGS
@given(pattern_args(), st.sampled_from([torch.float64, torch.float32]))
def test_scale_one_is_identity(args, dtype):
    b, h, q, k, seed, temp = args
    p = causal_pattern(b, h, q, k, seed, temp, dtype)
    out = scale_diagonal(p, 1.0)
    assert out.dtype == dtype
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(out, p, rtol=0, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("q, k", [(5, 5), (3, 6)])
def test_all_mass_on_diagonal_row_is_kept(dtype, q, k):
    p = causal_pattern(2, 2, q, k, seed=11).clone()
    eye, self_key = _eye(q, k)
    t = 2  # not row 0
    p[:, 1, t] = eye[t].double()  # head 1, query t attends only to itself
    p = p.to(dtype)
    for out in (remove_diagonal(p), scale_diagonal(p, 0.5), scale_diagonal(p, 2.0)):
        assert out.dtype == dtype
        assert torch.isfinite(out).all()
        assert torch.equal(out[:, 1, t], p[:, 1, t])
    # the other rows are still edited
    out = remove_diagonal(p)
    diag0 = out[:, 0][..., eye]  # head 0: [batch, q]
    assert torch.all(diag0[:, self_key != 0] == 0)


def test_kv_cache_rows_are_all_edited():
    """With q < k no query is position 0, so every row loses its diagonal."""
    q, k = 3, 7
    p = causal_pattern(1, 2, q, k, seed=5)
    out = remove_diagonal(p)
    for i in range(q):
        assert torch.all(out[:, :, i, i + k - q] == 0)
        assert torch.all(out[:, :, i, i + k - q + 1 :] == 0)
        # the keys before the query's own key keep their proportions
        before = p[:, :, i, : i + k - q]
        torch.testing.assert_close(out[:, :, i, : i + k - q], before / before.sum(-1, keepdim=True))
    torch.testing.assert_close(out.sum(-1), torch.ones(1, 2, q, dtype=torch.float64), rtol=0, atol=1e-12)
    out = scale_diagonal(p, 0.25)
    w, w0 = self_weights(out), self_weights(p)
    torch.testing.assert_close(w, 0.25 * w0, rtol=1e-12, atol=1e-15)


def test_keep_first_flag_on_a_full_pattern():
    """Row 0 of a non-causal pattern has off-diagonal mass; ``keep_first`` decides."""
    g = torch.Generator().manual_seed(8)
    p = torch.randn(1, 1, 4, 4, generator=g, dtype=torch.float64).softmax(-1)
    kept = remove_diagonal(p)
    assert torch.equal(kept[0, 0, 0], p[0, 0, 0])
    edited = scale_diagonal(p, 0.0, keep_first=False)
    assert edited[0, 0, 0, 0] == 0
    torch.testing.assert_close(edited[0, 0, 0, 1:], p[0, 0, 0, 1:] / p[0, 0, 0, 1:].sum())
    torch.testing.assert_close(edited[0, 0, 1:], kept[0, 0, 1:], rtol=0, atol=0)
    # in a causal pattern row 0 has no other key: kept even without keep_first
    c = causal_pattern(1, 1, 4, 4, seed=9)
    assert torch.equal(scale_diagonal(c, 0.0, keep_first=False)[0, 0, 0], c[0, 0, 0])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_comes_back_in_dtype(dtype):
    p = causal_pattern(2, 3, 6, 6, seed=12, dtype=dtype)
    out = remove_diagonal(p)
    assert out.dtype == dtype and torch.isfinite(out).all()
    eye, _ = _eye(6, 6)
    assert torch.all(out[..., 1:, :][..., eye[1:]] == 0)
    assert torch.equal(out[..., 0, :], p[..., 0, :])
    tol = 1e-2 if dtype == torch.bfloat16 else 3e-3
    torch.testing.assert_close(out.float().sum(-1), torch.ones(2, 3, 6), rtol=0, atol=tol)
    # the float32 computation, rounded once
    want = remove_diagonal(p.float()).to(dtype)
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    assert scale_diagonal(p, 0.5).dtype == dtype


def test_pattern_entropy_uniform_one_hot_and_zeros():
    from tlgeo.geometry.value_space import pattern_entropy

    q = 4
    uniform = torch.full((1, 1, 1, q), 1 / q, dtype=torch.float64)
    onehot = torch.zeros(1, 1, 1, q, dtype=torch.float64)
    onehot[..., 2] = 1
    causal = torch.tril(torch.ones(3, 3, dtype=torch.float64))
    causal = (causal / causal.sum(-1, keepdim=True))[None, None]  # row t: uniform over t + 1 keys, zeros after
    assert pattern_entropy(uniform).item() == pytest.approx(math.log(q))
    assert pattern_entropy(onehot).item() == 0.0  # 0 log 0 = 0, no NaN
    torch.testing.assert_close(pattern_entropy(causal)[0, 0], torch.log(torch.arange(1, 4, dtype=torch.float64)))
    assert pattern_entropy(uniform.to(torch.bfloat16)).dtype == torch.float32
