"""L2-matched perturbations: exact displacements, kept norms, the notebook's bisection, clipping, errors."""

import math

import pytest
import torch

from tlgeo.geometry.perturb import (
    check_delta,
    displacement,
    magnitude_perturb,
    random_directions,
    random_signs,
    rotate_exact,
    rotate_faithful,
)


def _states(dtype=torch.float64, shape=(3, 7, 16), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).mul(5).to(dtype)


@pytest.mark.parametrize("delta", [0.5, 2.0, 7.5])
def test_magnitude_moves_every_token_by_delta_and_keeps_direction(delta):
    h = _states()
    signs = random_signs(h.shape[:-1], torch.Generator().manual_seed(1))
    out, clipped = magnitude_perturb(h, delta, signs, flip="grow")
    torch.testing.assert_close(displacement(h, out), torch.full(h.shape[:-1], delta, dtype=torch.float64))
    cos = torch.nn.functional.cosine_similarity(out, h, dim=-1)
    torch.testing.assert_close(cos, torch.ones_like(cos))  # grow never flips: the direction is kept
    norms = h.norm(dim=-1)
    assert torch.equal(clipped, (signs < 0) & (delta > norms))


def test_magnitude_flip_options_when_delta_exceeds_the_norm():
    h = torch.tensor([[3.0, 4.0], [0.6, 0.8]], dtype=torch.float64)  # norms 5 and 1
    minus = -torch.ones(2, dtype=torch.float64)
    allow, c_allow = magnitude_perturb(h, 2.0, minus, flip="allow")
    torch.testing.assert_close(allow[1], -h[1])  # (1 - 2/1) h: flipped through the origin, as the notebook
    torch.testing.assert_close(displacement(h, allow), torch.tensor([2.0, 2.0], dtype=torch.float64))
    assert not c_allow.any()
    clip, c_clip = magnitude_perturb(h, 2.0, minus, flip="clip")
    torch.testing.assert_close(clip[1], torch.zeros(2, dtype=torch.float64))  # stops at 0: moved by ||h|| = 1
    torch.testing.assert_close(clip[0], h[0] * 0.6)
    grow, c_grow = magnitude_perturb(h, 2.0, minus, flip="grow")
    torch.testing.assert_close(grow[1], h[1] * 3.0)
    assert c_clip.tolist() == [False, True] and c_grow.tolist() == [False, True]


@pytest.mark.parametrize("delta", [0.1, 3.0, 9.9])
def test_exact_rotation_keeps_the_norm_and_moves_by_delta(delta):
    h = _states()
    noise = random_directions(h.shape, torch.Generator().manual_seed(2)).double()
    out, clipped = rotate_exact(h, delta, noise)
    torch.testing.assert_close(out.norm(dim=-1), h.norm(dim=-1))
    fits = h.norm(dim=-1) * 2 >= delta
    torch.testing.assert_close(displacement(h, out)[fits], torch.full_like(h[..., 0], delta)[fits])
    assert torch.equal(clipped, ~fits)
    # the turn is in the plane of h and the noise: h' is a combination of the two
    basis = torch.stack([h, noise], dim=-1)  # [..., d, 2]
    coef = torch.linalg.lstsq(basis, out.unsqueeze(-1)).solution
    torch.testing.assert_close((basis @ coef).squeeze(-1), out)


def test_exact_rotation_clips_beyond_the_antipode():
    h = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    out, clipped = rotate_exact(h, 5.0, torch.tensor([[1.0, 1.0]], dtype=torch.float64))
    torch.testing.assert_close(out, -h)  # theta clipped to pi: the farthest point, displacement 2 ||h||
    assert clipped.tolist() == [True]


def test_per_token_delta_relative_to_the_norm():
    h = _states()
    rel = 0.3
    delta = rel * h.norm(dim=-1)
    signs = torch.ones(h.shape[:-1], dtype=torch.float64)
    out, _ = magnitude_perturb(h, delta, signs)
    torch.testing.assert_close(out.norm(dim=-1), (1 + rel) * h.norm(dim=-1))
    turned, _ = rotate_exact(h, delta, random_directions(h.shape, torch.Generator().manual_seed(3)).double())
    torch.testing.assert_close(displacement(h, turned), delta)


@pytest.mark.parametrize("delta", [0.5, 2.0, 6.0])
def test_faithful_bisection_hits_the_mean_displacement(delta):
    h = _states()
    noise = random_directions(h.shape, torch.Generator().manual_seed(4)).double()
    out, m = rotate_faithful(h, delta, noise)
    d = displacement(h, out)
    assert abs(d.mean().item() - delta) < 1e-4 and 0 < m < 2
    assert d.std().item() > 1e-3  # single tokens move by more or less than delta: the notebook's quirk
    torch.testing.assert_close(out.norm(dim=-1), h.norm(dim=-1), atol=1e-6, rtol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_zero_delta_is_the_identity_bit_for_bit(dtype):
    h = _states(dtype)
    noise = random_directions(h.shape).to(dtype)
    assert magnitude_perturb(h, 0.0, random_signs(h.shape[:-1])).h is h
    assert rotate_exact(h, 0, noise).h is h
    assert rotate_faithful(h, 0.0, noise)[0] is h


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_low_precision_states_come_back_in_their_dtype(dtype):
    h = _states(dtype)
    out, _ = rotate_exact(h, 1.0, random_directions(h.shape).to(dtype))
    assert out.dtype == dtype
    ref, _ = rotate_exact(h.double(), 1.0, random_directions(h.shape, torch.Generator().manual_seed(0)).double())
    got, _ = rotate_exact(h, 1.0, random_directions(h.shape, torch.Generator().manual_seed(0)).to(dtype))
    assert (got.double() - ref).abs().max() < 0.1 * h.double().abs().max()


def test_zero_norm_tokens_stay_put_without_nan():
    h = torch.zeros(2, 4)
    h[1, 0] = 3.0
    mag = magnitude_perturb(h, 1.0, torch.tensor([1.0, 1.0]))
    rot = rotate_exact(h, 1.0, torch.ones(2, 4))
    for out, clipped in (mag, rot):
        assert torch.isfinite(out).all() and torch.equal(out[0], h[0]) and clipped.tolist() == [True, False]
    out, _ = rotate_faithful(h, 1.0, random_directions(h.shape))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "1", True, torch.tensor([1.0, -0.5])])
def test_bad_delta_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="delta must be"):
        check_delta(bad)
    h = _states()
    with pytest.raises(ValueError, match="delta must be"):
        magnitude_perturb(h, bad, torch.ones(h.shape[:-1]))


def test_shape_and_option_errors():
    h = _states()
    with pytest.raises(ValueError, match="signs must be one per token"):
        magnitude_perturb(h, 1.0, torch.ones(3))
    with pytest.raises(ValueError, match="unknown flip"):
        magnitude_perturb(h, 1.0, torch.ones(h.shape[:-1]), flip="mirror")
    with pytest.raises(ValueError, match="noise must have the shape"):
        rotate_exact(h, 1.0, torch.ones(3, 16))
    with pytest.raises(ValueError, match="one delta per tensor"):
        rotate_faithful(h, torch.ones(3, 7), torch.ones_like(h))


def test_the_geometry_of_the_angle():
    """theta = 2 asin(delta / 2r) is the chord-length formula: check one case by hand."""
    h = torch.tensor([[2.0, 0.0, 0.0]], dtype=torch.float64)
    out, _ = rotate_exact(h, 2.0, torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64))
    theta = 2 * math.asin(2.0 / 4.0)  # 60 degrees
    torch.testing.assert_close(
        out, torch.tensor([[2 * math.cos(theta), 2 * math.sin(theta), 0.0]], dtype=torch.float64)
    )
