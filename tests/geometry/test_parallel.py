"""Property tests for ``tlgeo.geometry`` (spec A, section 1).

Style follows tuned-lens' float64 property tests: hypothesis draws float64 arrays,
the identities are checked in float64 with tight, norm-relative tolerances, and
low-precision dtypes are compared with a float64 computation of the same thing.
"""

from __future__ import annotations

import math

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tlgeo.geometry import (
    EPS,
    Split,
    check_scale,
    compute_dtype,
    cosine,
    norm_ratio,
    parallel_ratio,
    scale_components,
    split_parallel,
)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _flush(x: float, below: float = 1e-30) -> float:
    # Tiny entries would make squared norms underflow (an FPU matter, not the code's).
    return 0.0 if abs(x) < below else x


# Finite float64 entries.
ELEM = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False, allow_subnormal=False).map(
    _flush
)
# Entries that are representable without overflow in float16 too.
ELEM_LP = st.floats(min_value=-50.0, max_value=50.0, allow_nan=False, allow_infinity=False, allow_subnormal=False).map(
    lambda x: _flush(x, 1e-4)
)
SCALE = st.floats(min_value=-10.0, max_value=10.0, allow_nan=False, allow_infinity=False)

DIMS = st.integers(min_value=1, max_value=8)
BATCH = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))


@st.composite
def same_shape_pair(draw, elements=ELEM):
    """``(y, ref)`` float64 tensors of the same shape ``[..., d]``."""
    shape = draw(BATCH) + (draw(DIMS),)
    y = draw(hnp.arrays(np.float64, shape, elements=elements))
    r = draw(hnp.arrays(np.float64, shape, elements=elements))
    return _t(y), _t(r)


@st.composite
def broadcast_pair(draw):
    """``(y, ref)`` whose batch shapes broadcast (either side may be the smaller)."""
    d = draw(DIMS)
    ybatch = draw(BATCH)
    rbatch = draw(hnp.broadcastable_shapes(ybatch, min_dims=0, max_dims=3, max_side=4))
    if draw(st.booleans()):
        ybatch, rbatch = rbatch, ybatch
    y = draw(hnp.arrays(np.float64, ybatch + (d,), elements=ELEM))
    r = draw(hnp.arrays(np.float64, rbatch + (d,), elements=ELEM))
    return _t(y), _t(r)


def vnorm(x: torch.Tensor) -> torch.Tensor:
    return x.norm(dim=-1, keepdim=True)


def assert_vec_close(got, want, scale, rel=1e-12, tiny=1e-300):
    """``|got - want| <= rel * scale`` entrywise, ``scale`` a per-vector norm ``[..., 1]``."""
    got, want = torch.broadcast_tensors(got.double(), want.double())
    bound = rel * scale.double() + tiny
    err = (got - want).abs()
    assert torch.all(err <= bound), f"max err {err.max().item():.3e}, bound {bound.min().item():.3e}"


# ---------------------------------------------------------------------------
# split_parallel
# ---------------------------------------------------------------------------


@SETTINGS
@given(same_shape_pair())
def test_split_sums_to_y(pair):
    y, r = pair
    s = split_parallel(y, r)
    assert isinstance(s, Split)
    assert s.par.shape == y.shape and s.perp.shape == y.shape and s.alpha.shape == y.shape[:-1]
    assert s.par.dtype == s.perp.dtype == s.alpha.dtype == torch.float64
    assert_vec_close(s.par + s.perp, y, vnorm(y))


@SETTINGS
@given(same_shape_pair())
def test_perp_is_orthogonal_to_ref(pair):
    y, r = pair
    # Below ||r||^2 = eps the denominator is clamped and no projection is intended.
    assume(bool(torch.all((r * r).sum(-1) >= 2 * EPS)))
    s = split_parallel(y, r)
    dot = (s.perp * r).sum(-1)
    d = y.shape[-1]
    bound = 8 * d * 2.0**-52 * y.norm(dim=-1) * r.norm(dim=-1) + 1e-300
    assert torch.all(dot.abs() <= bound)


@SETTINGS
@given(same_shape_pair())
def test_par_is_parallel_to_ref(pair):
    y, r = pair
    s = split_parallel(y, r)
    # par is alpha * ref, alpha as returned ...
    assert_vec_close(s.par, s.alpha.unsqueeze(-1) * r, vnorm(y) + 1.0)
    # ... and alpha is <y, r> / max(||r||^2, eps), computed here independently in numpy.
    yn, rn = y.numpy(), r.numpy()
    alpha = np.einsum("...d,...d->...", yn, rn) / np.maximum(np.einsum("...d,...d->...", rn, rn), EPS)
    alpha_bound = (
        1e-12
        * (np.linalg.norm(yn, axis=-1) * np.linalg.norm(rn, axis=-1))
        / np.maximum(np.einsum("...d,...d->...", rn, rn), EPS)
        + 1e-300
    )
    assert np.all(np.abs(s.alpha.numpy() - alpha) <= alpha_bound)
    # Cauchy-Schwarz: the projection is never longer than y.
    assert torch.all(s.par.norm(dim=-1) <= y.norm(dim=-1) * (1 + 1e-12) + 1e-300)


@SETTINGS
@given(broadcast_pair())
def test_split_broadcasts_like_a_loop(pair):
    y, r = pair
    s = split_parallel(y, r)
    yb, rb = torch.broadcast_tensors(y, r)
    assert s.par.shape == yb.shape and s.perp.shape == yb.shape and s.alpha.shape == yb.shape[:-1]
    for idx in np.ndindex(*yb.shape[:-1]):
        one = split_parallel(yb[idx], rb[idx])
        scale = vnorm(yb[idx]) + 1e-300
        assert_vec_close(s.par[idx], one.par, scale)
        assert_vec_close(s.perp[idx], one.perp, scale)
        assert_vec_close(s.alpha[idx], one.alpha, (one.alpha.abs() + 1e-300).unsqueeze(-1))


ALL_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("ref_value", [0.0, 1e-30])
def test_zero_and_tiny_reference(dtype, ref_value):
    g = torch.Generator().manual_seed(0)
    y = (torch.randn(3, 5, 16, generator=g, dtype=torch.float64) * 10).to(dtype)
    r = torch.full((3, 5, 16), ref_value, dtype=torch.float64).to(dtype)
    s = split_parallel(y, r)
    for t in s:
        assert t.dtype == dtype
        assert torch.isfinite(t).all()
    assert_vec_close(s.par, torch.zeros_like(y), vnorm(y.double()), rel=1e-20)
    assert_vec_close(s.alpha.unsqueeze(-1), torch.zeros(3, 5, 1), vnorm(y.double()), rel=1e-20)
    assert torch.equal(s.perp, y)
    # Same for the statistics.
    for fn in (parallel_ratio, norm_ratio, cosine):
        out = fn(y, r)
        assert torch.isfinite(out).all(), fn.__name__
    for fn in (parallel_ratio, cosine):
        out = fn(y, r)
        if ref_value == 0.0:
            assert torch.equal(out, torch.zeros(3, 5, dtype=out.dtype)), fn.__name__
        elif fn is parallel_ratio:  # alpha is clamped: a 1e-30 reference carries ~no parallel part
            assert torch.all(out.abs() <= 1e-15), fn.__name__
        else:  # a tiny but non-zero reference still has a direction: |cos| <= 1, finite
            assert torch.all(out.abs() <= 1 + 1e-6), fn.__name__
    # And scaling with a zero reference only scales y as a whole.
    out = scale_components(y, r, 0.0, 0.5)
    assert out.dtype == dtype and torch.isfinite(out).all()
    assert_vec_close(out, 0.5 * y.double(), vnorm(y.double()), rel=1e-2 if dtype != torch.float64 else 1e-12)


LOW = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8, torch.float32: 2.0**-24}


@pytest.mark.parametrize("dtype", list(LOW))
@settings(max_examples=50, deadline=None)
@given(pair=same_shape_pair(elements=ELEM_LP))
def test_low_precision_matches_float64(dtype, pair):
    """Cast back to the input dtype; the arithmetic itself is float32, not ``dtype``."""
    y, r = pair[0].to(dtype), pair[1].to(dtype)
    s = split_parallel(y, r)
    assert s.par.dtype == s.perp.dtype == s.alpha.dtype == dtype
    want = split_parallel(y.double(), r.double())
    ny = vnorm(y.double())
    u = LOW[dtype]
    d = y.shape[-1]
    # One rounding to `dtype` of the exact result, plus float32 arithmetic error.
    sub = torch.finfo(dtype).tiny * u  # half the subnormal spacing of `dtype`
    for got, exp in ((s.par, want.par), (s.perp, want.perp)):
        bound = u * exp.abs() + 8 * d * 2.0**-24 * ny + sub
        err = (got.double() - exp).abs()
        assert torch.all(err <= bound), (dtype, err.max().item())
    scale_a = ny.squeeze(-1) / r.double().pow(2).sum(-1).clamp_min(EPS).sqrt()
    bound_a = u * want.alpha.abs() + 8 * d * 2.0**-24 * scale_a + sub
    assert torch.all((s.alpha.double() - want.alpha).abs() <= bound_a)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_arithmetic_is_float32(dtype):
    """||r||^2 overflows float16 (and loses bf16 precision); float32 arithmetic does not."""
    d = 1000
    g = torch.Generator().manual_seed(1)
    r = (300.0 + torch.rand(d, generator=g, dtype=torch.float64)).to(dtype)
    y = (0.5 * r.double() + torch.randn(d, generator=g, dtype=torch.float64) * 0.01).to(dtype)
    s = split_parallel(y, r)
    want = split_parallel(y.double(), r.double())
    assert torch.isfinite(s.alpha).all()
    assert abs(s.alpha.double().item() - want.alpha.item()) <= LOW[dtype] * abs(want.alpha.item()) + 1e-6
    assert_vec_close(s.par, want.par, want.par.abs().unsqueeze(-1).max(-2).values, rel=LOW[dtype])
    out = scale_components(y, r, 0.0, 1.0)
    assert out.dtype == dtype
    assert_vec_close(out, want.perp, vnorm(y.double()), rel=1e-3)


def test_mixed_dtypes_compute_in_float64_and_cast_to_y():
    y = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16)
    r = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    assert compute_dtype(y, r) == torch.float64
    assert compute_dtype(y, r.float()) == torch.float32
    assert compute_dtype(y) == torch.float32
    s = split_parallel(y, r)
    assert s.par.dtype == torch.float16
    assert s.par.tolist() == [1.0, 0.0, 0.0] and s.perp.tolist() == [0.0, 2.0, 3.0]


# ---------------------------------------------------------------------------
# scale_components
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("ones", [(1.0, 1.0), (1, 1), "tensor"])
def test_noop_is_bitwise(dtype, ones):
    g = torch.Generator().manual_seed(2)
    y = (torch.randn(4, 7, 32, generator=g) * 3).to(dtype)
    r = (torch.randn(4, 7, 32, generator=g) * 3).to(dtype)
    if ones == "tensor":
        out = scale_components(y, r, torch.ones(4, 7), torch.tensor(1.0))
        # 1*y + 0*par is exact (value-equal; -0.0 may become +0.0).
        assert out.dtype == dtype and torch.equal(out, y)
    else:
        out = scale_components(y, r, *ones)
        assert out.dtype == dtype and out.shape == y.shape
        assert torch.equal(out.view(torch.uint8), y.view(torch.uint8))


@SETTINGS
@given(same_shape_pair())
def test_scale_01_is_perp_and_10_is_par(pair):
    y, r = pair
    s = split_parallel(y, r)
    scale = vnorm(y)
    assert_vec_close(scale_components(y, r, 0.0, 1.0), s.perp, scale)
    assert_vec_close(scale_components(y, r, 1.0, 0.0), s.par, scale)
    assert_vec_close(scale_components(y, r, 0.0, 0.0), torch.zeros_like(y), scale)


@SETTINGS
@given(same_shape_pair(), SCALE, SCALE)
def test_scale_is_linear_in_components(pair, sp, sq):
    y, r = pair
    s = split_parallel(y, r)
    out = scale_components(y, r, sp, sq)
    assert out.shape == y.shape and out.dtype == y.dtype
    scale = (abs(sp) + abs(sq) + 1) * vnorm(y)
    assert_vec_close(out, sp * s.par + sq * s.perp, scale, rel=1e-11)
    # The edit changes only what it should: splitting the result again gives
    # (sp * par, sq * perp) -- where the split is a true projection (||r||^2 >= eps).
    proj = (r * r).sum(-1) >= EPS
    again = split_parallel(out, r)
    assert_vec_close(again.perp[proj], sq * s.perp[proj], scale[proj], rel=1e-11)
    assert_vec_close(again.par[proj], sp * s.par[proj], scale[proj], rel=1e-11)


# Batch shapes whose last axis is not 1 (see test_tensor_scale_trailing_unit_axis).
BATCH_NO_TRAILING_1 = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4).filter(lambda s: s[-1] != 1)


@SETTINGS
@given(st.data())
def test_tensor_scales_match_loop(data):
    batch = data.draw(BATCH_NO_TRAILING_1)
    d = data.draw(DIMS)
    y = _t(data.draw(hnp.arrays(np.float64, batch + (d,), elements=ELEM)))
    r = _t(data.draw(hnp.arrays(np.float64, batch + (d,), elements=ELEM)))
    sp = _t(data.draw(hnp.arrays(np.float64, batch, elements=SCALE)))
    sq = _t(data.draw(hnp.arrays(np.float64, batch, elements=SCALE)))
    out = scale_components(y, r, sp, sq)
    assert out.shape == y.shape
    for idx in np.ndindex(*batch):
        one = scale_components(y[idx], r[idx], float(sp[idx]), float(sq[idx]))
        scale = (abs(float(sp[idx])) + abs(float(sq[idx])) + 1) * vnorm(y[idx])
        assert_vec_close(out[idx], one, scale, rel=1e-11)
    # A 0-d tensor acts like the number, and mixing a tensor with a number works.
    assert_vec_close(
        scale_components(y, r, torch.tensor(0.3, dtype=torch.float64), 1.5),
        scale_components(y, r, 0.3, 1.5),
        3 * vnorm(y),
    )


@pytest.mark.parametrize(
    "y_shape, s_shape",
    [
        ((3, 1, 4), (3, 1)),  # one scale per vector; the last batch axis happens to be 1
        ((2, 5, 4), (2, 1)),  # one scale per batch row, broadcast over positions
        ((1, 4), (1,)),  # a single vector in a batch of one
        ((2, 2, 4), (2, 1)),  # per batch row, with batch == positions: silently wrong values
    ],
)
def test_tensor_scale_trailing_unit_axis(y_shape, s_shape):
    """A scale "broadcastable to [...]" whose last axis is 1 is still one scale per vector."""
    g = torch.Generator().manual_seed(3)
    y = torch.randn(*y_shape, generator=g, dtype=torch.float64)
    r = torch.randn(*y_shape, generator=g, dtype=torch.float64)
    sp = torch.rand(*s_shape, generator=g, dtype=torch.float64)
    s = split_parallel(y, r)
    want = sp.expand(y_shape[:-1]).unsqueeze(-1) * s.par + s.perp
    out = scale_components(y, r, sp, 1.0)
    assert out.shape == y.shape
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_gradients_flow_to_y_ref_and_scale():
    g = torch.Generator().manual_seed(4)
    y = torch.randn(2, 3, 5, generator=g, dtype=torch.float64, requires_grad=True)
    r = (torch.randn(2, 3, 5, generator=g, dtype=torch.float64) + 0.5).requires_grad_(True)
    sp = torch.rand(2, 3, generator=g, dtype=torch.float64, requires_grad=True)
    sq = torch.rand(2, 3, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: scale_components(a, b, c, 0.7), (y, r, sp))
    assert torch.autograd.gradcheck(lambda a, b, c, e: scale_components(a, b, c, e), (y, r, sp, sq))
    # And the grads are really non-zero (nothing is detached).
    out = scale_components(y, r, sp, sq)
    out.square().sum().backward()
    for t in (y, r, sp, sq):
        assert t.grad is not None and t.grad.abs().sum() > 0
    # float32 inputs (what models use) also keep the graph.
    y32 = y.detach().float().requires_grad_(True)
    scale_components(y32, r.detach().float(), 0.0, 1.0).sum().backward()
    assert y32.grad is not None and torch.isfinite(y32.grad).all()


def test_gradcheck_statistics():
    g = torch.Generator().manual_seed(5)
    y = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    r = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: split_parallel(a, b).perp, (y, r))
    assert torch.autograd.gradcheck(parallel_ratio, (y, r))
    assert torch.autograd.gradcheck(cosine, (y, r))


BAD_SCALES = {
    "nan": float("nan"),
    "inf": float("inf"),
    "-inf": -float("inf"),
    "np-nan": np.float64("nan"),
    "tensor-nan": torch.tensor(float("nan")),
    "tensor-with-nan": torch.tensor([1.0, float("nan")]),
    "tensor-with-inf": torch.tensor([0.5, float("inf")]),
    "None": None,
    "str-abc": "abc",
    "str-0.5": "0.5",  # a string is not a number, even if float() can parse it
    "list": [0.5, 1.0],
    "object": object(),
    "complex": 1 + 2j,
}


@pytest.mark.parametrize("bad", list(BAD_SCALES.values()), ids=list(BAD_SCALES))
@pytest.mark.parametrize("which", ["s_par", "s_perp"])
def test_bad_scale_raises(bad, which):
    y = torch.randn(2, 4, dtype=torch.float64)
    r = torch.randn(2, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match=which):
        scale_components(y, r, **{which: bad})
    with pytest.raises(ValueError, match="myname"):
        check_scale(bad, "myname")


# ---------------------------------------------------------------------------
# check_scale
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("good", [0, 1, -3, 0.5, -2.25, 1e30, np.float32(0.25), np.int64(2), True])
def test_check_scale_accepts_numbers(good):
    out = check_scale(good, "s")
    assert isinstance(out, float) and out == float(good)


@pytest.mark.parametrize(
    "good", [torch.tensor(0.5), torch.zeros(3), torch.tensor([1.0, -2.0]), torch.tensor(2), torch.ones(2, 2).half()]
)
def test_check_scale_accepts_finite_tensors(good):
    assert check_scale(good, "s") is good


# ---------------------------------------------------------------------------
# parallel_ratio, norm_ratio, cosine
# ---------------------------------------------------------------------------


@SETTINGS
@given(same_shape_pair())
def test_parallel_ratio_is_par_over_perp(pair):
    y, r = pair
    s = split_parallel(y, r)
    pn, qn = s.par.norm(dim=-1), s.perp.norm(dim=-1)
    ok = qn > 10 * math.sqrt(EPS)  # not near the clamp on the denominator
    pr = parallel_ratio(y, r)
    assert pr.shape == y.shape[:-1] and pr.dtype == torch.float64
    assert torch.all(torch.isfinite(pr)) and torch.all(pr >= 0)
    want = pn / qn.clamp_min(1e-300)
    assert torch.all((pr - want).abs()[ok] <= 1e-10 * want[ok] + 1e-300)
    # ... and |alpha| * ||r|| / ||perp||, the paper's form.
    want2 = s.alpha.abs() * r.norm(dim=-1) / qn.clamp_min(1e-300)
    assert torch.all((pr - want2).abs()[ok] <= 1e-10 * want2[ok] + 1e-300)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_parallel_ratio_edge_cases(dtype):
    g = torch.Generator().manual_seed(6)
    r = torch.randn(5, 8, generator=g).to(dtype)
    zero = torch.zeros_like(r)
    # zero update -> 0
    pr = parallel_ratio(zero, r)
    assert torch.equal(pr, torch.zeros_like(pr))
    # zero reference -> 0, finite
    pr = parallel_ratio(r, zero)
    assert torch.isfinite(pr).all() and torch.equal(pr, torch.zeros_like(pr))
    # exactly parallel update -> large but finite
    for c in (3.0, -2.0, 1e4):
        pr = parallel_ratio(c * r, r)
        assert torch.isfinite(pr).all() and torch.all(pr > 1.0), (c, pr)
    # exactly orthogonal update -> 0
    y = torch.zeros(8, dtype=dtype)
    y[1] = 2.0
    e0 = torch.zeros(8, dtype=dtype)
    e0[0] = 1.0
    assert parallel_ratio(y, e0).item() == 0.0
    # 45 degrees -> 1
    assert parallel_ratio(y + 2 * e0, e0).item() == pytest.approx(1.0, rel=1e-6)


@SETTINGS
@given(same_shape_pair(), st.floats(min_value=-100, max_value=100, allow_nan=False).map(_flush))
def test_norm_ratio_and_cosine_identities(pair, c):
    y, r = pair
    ny = y.norm(dim=-1)
    big = ny > 10 * math.sqrt(EPS)
    nr = norm_ratio(y, y)
    assert torch.all(torch.isfinite(nr))
    assert torch.allclose(nr[big], torch.ones_like(nr[big]), rtol=1e-12, atol=0)
    assert torch.allclose(norm_ratio(c * y, y)[big], torch.full_like(ny[big], abs(c)), rtol=1e-12, atol=1e-300)
    cs = cosine(y, y)
    assert torch.all(torch.isfinite(cs))
    assert torch.allclose(cs[big], torch.ones_like(cs[big]), rtol=1e-12, atol=0)
    # Symmetric, bounded, and the cosine of the matching split.
    cyr = cosine(y, r)
    assert torch.all(torch.isfinite(cyr)) and torch.all(cyr.abs() <= 1 + 1e-12)
    assert torch.allclose(cyr, cosine(r, y), rtol=1e-12, atol=1e-15)
    bigc = big & (abs(c) * ny > 10 * math.sqrt(EPS))
    assert torch.allclose(cosine(c * y, y)[bigc], torch.full_like(ny[bigc], math.copysign(1.0, c)), rtol=1e-12)
    nr_ = r.norm(dim=-1)
    okr = big & (nr_ > 10 * math.sqrt(EPS))
    s = split_parallel(y, r)
    par_frac = s.par.norm(dim=-1) / ny.clamp_min(1e-300)
    assert torch.allclose(cyr.abs()[okr], par_frac[okr], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_cosine_orthogonal_and_zero(dtype):
    a = torch.tensor([[1.0, 0.0, 0.0], [0.0, 3.0, 4.0], [0.0, 0.0, 0.0]], dtype=dtype)
    b = torch.tensor([[0.0, 2.0, 5.0], [7.0, 0.0, 0.0], [1.0, 2.0, 3.0]], dtype=dtype)
    c = cosine(a, b)
    assert torch.isfinite(c).all()
    assert c.tolist() == [0.0, 0.0, 0.0]
    z = torch.zeros(4, 3, dtype=dtype)
    assert torch.equal(cosine(z, z), torch.zeros(4, dtype=cosine(z, z).dtype))
    assert torch.equal(norm_ratio(z, z), torch.zeros(4, dtype=norm_ratio(z, z).dtype))
    assert torch.equal(parallel_ratio(z, z), torch.zeros(4, dtype=parallel_ratio(z, z).dtype))
    assert cosine(a[1], a[1]).item() == pytest.approx(1.0, rel=1e-3)
    assert norm_ratio(a[1], b[0]).item() == pytest.approx(5.0 / math.sqrt(29.0), rel=1e-2)
