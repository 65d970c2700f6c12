"""Fuzzed inputs to the decomposition kernels: random shapes and dtypes, norms from 2^-100 to 2^120,
zero vectors, NaN and inf. Finite inputs give finite outputs with ``par + perp = y`` and ``perp`` across
``ref``; a non-finite entry spoils its own vector's outputs and no other's."""

from __future__ import annotations

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tlgeo.geometry.parallel import EPS, cosine, norm_ratio, parallel_ratio, scale_components, split_parallel

SETTINGS = settings(
    max_examples=int(__import__("os").environ.get("TLGEO_FUZZ_EXAMPLES", 80)), deadline=None, derandomize=True
)  # the same examples in every test run (more: TLGEO_FUZZ_EXAMPLES)
DTYPES = st.sampled_from([torch.float32, torch.float64, torch.bfloat16, torch.float16])


@st.composite
def scaled_pair(draw):
    """``(y, ref)`` of one random shape ``[..., d]``, each vector scaled by its own power of two."""
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5))
    unit = st.floats(-1, 1, allow_nan=False, allow_subnormal=False, width=32).map(lambda x: x if abs(x) > 1e-6 else 0.0)
    y = draw(hnp.arrays(np.float64, shape, elements=unit))
    r = draw(hnp.arrays(np.float64, shape, elements=unit))
    # each vector's norm from 2^-60 to 2^80 (||r||^2 overflows float32 above 2^64), y within 2^40 of its ref: alpha
    # = <y, r> / ||r||^2 itself stays a normal float32 (far below, it is subnormal and loses its digits)
    er = draw(hnp.arrays(np.int64, shape[:-1], elements=st.integers(-60, 80)))
    ey = er + draw(hnp.arrays(np.int64, shape[:-1], elements=st.integers(-40, 40)))
    zero = draw(hnp.arrays(np.bool_, shape[:-1]))  # some references exactly zero
    y = np.ldexp(y, ey[..., None])
    r = np.where(zero[..., None], 0.0, np.ldexp(r, er[..., None]))
    return torch.from_numpy(y), torch.from_numpy(r)


@SETTINGS
@given(scaled_pair(), st.sampled_from([torch.float32, torch.float64]))
def test_finite_inputs_of_any_scale_give_finite_exact_splits(pair, dtype):
    y, r = (t.to(dtype) for t in pair)
    s = split_parallel(y, r)
    for t in (s.par, s.perp, s.alpha, parallel_ratio(y, r), norm_ratio(y, r), cosine(y, r)):
        assert torch.isfinite(t).all()
    # par + perp = y to rounding, relative to ||y||; perp has no component along ref
    y64, par, perp = y.double(), s.par.double(), s.perp.double()
    tol = {torch.float32: 1e-5, torch.float64: 1e-12}[dtype]
    ny = y64.norm(dim=-1)
    assert ((par + perp - y64).norm(dim=-1) <= tol * ny + 1e-300).all()
    # perp is across ref where ||ref||^2 clears the clamp (below it, alpha is shrunk on purpose: EPS)
    rn = r.double().norm(dim=-1, keepdim=True)
    along = (perp * r.double() / rn.clamp_min(1e-300)).sum(-1).abs()
    clear = rn.squeeze(-1) ** 2 > 2 * EPS
    assert (along[clear] <= 10 * tol * ny[clear] + 1e-300).all()
    assert (cosine(y, r).abs() <= 1 + tol).all()


@SETTINGS
@given(scaled_pair())
def test_alpha_matches_the_plain_formula_wherever_it_does_not_overflow(pair):
    y, r = (t.to(torch.float32) for t in pair)
    plain = (y * r).sum(-1) / (r * r).sum(-1).clamp_min(EPS)
    ok = torch.isfinite(plain) & (r.abs().amax(-1) < 2.0**60) & (r.abs().amax(-1) > 0)
    got = split_parallel(y, r).alpha
    assert torch.equal(got[ok], plain[ok])  # the power-of-two scaling changes no bit


@settings(max_examples=40, deadline=None, derandomize=True)
@given(scaled_pair(), DTYPES, st.sampled_from([float("nan"), float("inf"), float("-inf")]), st.data())
def test_a_non_finite_entry_spoils_only_its_own_vector(pair, dtype, bad, data):
    y, r = pair
    if dtype in (torch.float16, torch.bfloat16):  # their range: the vectors brought to about 1
        y, r = y / y.abs().amax(-1, keepdim=True).clamp_min(1e-30), r / r.abs().amax(-1, keepdim=True).clamp_min(1e-30)
    y, r = y.to(dtype), r.to(dtype)
    flat = y.reshape(-1, y.shape[-1]).clone()
    i = data.draw(st.integers(0, flat.shape[0] - 1))
    j = data.draw(st.integers(0, flat.shape[1] - 1))
    flat[i, j] = bad
    y = flat.reshape(y.shape)
    s = split_parallel(y, r)
    edited = scale_components(y, r, 0.5, 2.0)
    others = torch.ones(flat.shape[0], dtype=torch.bool)
    others[i] = False
    for t in (s.par, s.perp, edited):
        t = t.reshape(-1, t.shape[-1])
        assert torch.isfinite(t[others]).all()  # the other vectors are untouched by it
        assert not torch.isfinite(t[i]).all()  # and the bad one says so: nothing hides it


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_no_op_edit_of_extreme_states_is_bitwise(dtype):
    y = torch.tensor([[3e38, -1e-30, 0.0], [float("nan"), 1.0, 2.0]]).to(dtype)
    assert scale_components(y, torch.ones_like(y), 1.0, 1.0) is y
