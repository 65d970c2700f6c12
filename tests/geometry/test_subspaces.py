"""PDSF decomposition: exact orthogonality and P + D + S + F = h (float64), PR of known spectra,
rank selection, the authors' shared-basis variant, bad input."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from tlgeo.geometry.subspaces import (
    axis_angles,
    energy_shares,
    fit_pdsf,
    participation_ratio,
    pca_basis,
    prediction_directions,
    split_pdsf,
    subspace_participation,
)


def _data(n=60, d=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g, dtype=torch.float64) * torch.linspace(3, 0.2, d, dtype=torch.float64)
    w_u = torch.randn(d, 50, generator=g, dtype=torch.float64)
    tokens = torch.randint(0, 50, (n,), generator=g)
    return h, w_u, tokens


def test_participation_ratio_of_known_spectra():
    assert float(participation_ratio(torch.ones(7, dtype=torch.float64))) == pytest.approx(7)
    assert float(participation_ratio(torch.tensor([5.0, 0, 0]))) == pytest.approx(1)
    assert float(participation_ratio(torch.tensor([2.0, 1.0]))) == pytest.approx(9 / 5)
    assert float(participation_ratio(torch.zeros(3))) == 0.0  # no NaN on an empty spectrum


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), kd=st.integers(1, 6), ks=st.integers(1, 6))
def test_exact_split_is_orthogonal_and_complete(seed, kd, ks):
    h, w_u, tokens = _data(seed=seed)
    u = prediction_directions(w_u, tokens)
    basis = fit_pdsf(h, u, k_D=kd, k_S=ks, mode="exact")
    parts = split_pdsf(h, u, basis)
    torch.testing.assert_close(sum(parts.values()), h, rtol=1e-12, atol=1e-12)
    names = list(parts)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert (parts[a] * parts[b]).sum(-1).abs().max() < 1e-10, (a, b)
    e = energy_shares(parts)
    torch.testing.assert_close(sum(e.values()), torch.ones(len(h), dtype=torch.float64))
    assert ((parts["D"] * u).sum(-1).abs().max() < 1e-10) and ((parts["S"] * u).sum(-1).abs().max() < 1e-10)


def test_faithful_split_sums_to_h_but_d_is_not_orthogonal_to_each_u():
    h, w_u, tokens = _data()
    u = prediction_directions(w_u, tokens)
    basis = fit_pdsf(h, u, k_D=4, k_S=4, mode="faithful")
    parts = split_pdsf(h, u, basis)
    torch.testing.assert_close(sum(parts.values()), h)
    assert (parts["D"] * u).sum(-1).abs().max() > 1e-3  # the shared basis: D leaks into u per state
    assert (basis.S.T @ basis.D).abs().max() < 1e-12
    exact = split_pdsf(h, u, basis, mode="exact")
    torch.testing.assert_close(exact["P"], parts["P"])  # P is the same in both


def test_rank_from_participation_ratio_is_clipped():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(200, 30, generator=g, dtype=torch.float64)  # isotropic: PR about 26
    b, spec = pca_basis(x, None, bounds=(2, 12))
    assert b.shape == (30, 12) and spec.shape == (30,)
    thin = torch.randn(200, 1, generator=g, dtype=torch.float64) @ torch.randn(1, 30, generator=g, dtype=torch.float64)
    b1, _ = pca_basis(thin + 1e-9 * x, None, bounds=(2, 12))  # PR about 1 -> the lower bound
    assert b1.shape == (30, 2)
    torch.testing.assert_close(b.T @ b, torch.eye(12, dtype=torch.float64))


def test_norm_weight_folds_into_the_direction_and_axis_angles():
    h, w_u, tokens = _data()
    w = torch.linspace(0.5, 2, h.shape[1], dtype=torch.float64)
    u = prediction_directions(w_u, tokens, norm_weight=w)
    raw = w_u[:, tokens].T * w
    torch.testing.assert_close(u, raw / raw.norm(dim=-1, keepdim=True))
    axes = torch.eye(h.shape[1], dtype=torch.float64)[:, :2]
    ang = axis_angles(u, axes)
    torch.testing.assert_close(torch.cos(torch.deg2rad(ang)), u[:, :2].abs())
    coords = torch.randn(100, 3, dtype=torch.float64) * torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    assert subspace_participation(coords) == pytest.approx(3, rel=0.3)


def test_bad_input():
    h, w_u, tokens = _data(n=10)
    u = prediction_directions(w_u, tokens)
    with pytest.raises(ValueError, match="k=11 principal axes asked of 10 points"):
        fit_pdsf(h, u, k_D=11)
    with pytest.raises(ValueError, match="k=30 principal axes asked of 10 points in 24 dimensions"):
        pca_basis(torch.randn(10, 24), 30)
    with pytest.raises(ValueError, match="an empty set of states"):
        fit_pdsf(h[:0], u[:0])
    with pytest.raises(ValueError, match="mode must be"):
        fit_pdsf(h, u, mode="approx")
    with pytest.raises(ValueError, match=r"must both be \[n, d\]"):
        split_pdsf(h, u[:, :3], fit_pdsf(h, u, k_D=2, k_S=2))


def test_a_part_at_rounding_level_has_no_participation_whatever_its_rounding():
    """A part whose energy is ~1e-16 of the states' (the F part of a layer the subspaces fill, seen on a tiny model:
    PR 1 on the CPU, 0 on a GPU) has PR 0 given the states' scale; a real part keeps its PR (float64)."""
    g = torch.Generator().manual_seed(0)
    states = torch.randn(40, 8, generator=g, dtype=torch.float64)
    scale = float((states * states).sum(-1).mean())
    for noise in (1e-9, 3e-10, 0.0):  # variance ~1e-18..1e-20 of the states'
        tiny = noise * torch.randn(40, 1, generator=g, dtype=torch.float64)
        assert subspace_participation(tiny, scale=scale) == 0.0
    assert subspace_participation(1e-9 * torch.randn(40, 1, generator=g, dtype=torch.float64)) == pytest.approx(1.0)
    real = states[:, :3]
    assert subspace_participation(real, scale=scale) == subspace_participation(real) > 2
