"""The geometry of a tokenwise approximation: cosine, residual angle, error, dominant-subspace energy."""

import pytest
import torch

from tlgeo.geometry.update_split import dominant_basis, update_geometry


def test_exact_approximation_and_orthogonal_residual():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(50, 5, generator=g, dtype=torch.float64)
    tok = torch.zeros(50, 5, dtype=torch.float64)
    tok[:, 0] = 1.0 + torch.rand(50, generator=g, dtype=torch.float64)  # Delta_tok along e0
    geo = update_geometry(h, h + tok, h + tok)
    torch.testing.assert_close(geo.cos_update, torch.ones(50, dtype=torch.float64))
    assert (geo.rel_error == 0).all() and (geo.residual_energy == 0).all() and geo.rank == 1
    r = torch.zeros(50, 5, dtype=torch.float64)
    r[:, 1] = 0.5  # a residual perpendicular to Delta_tok, outside its subspace
    geo = update_geometry(h, h + tok + r, h + tok)
    torch.testing.assert_close(geo.residual_angle, torch.full((50,), 90.0, dtype=torch.float64))
    torch.testing.assert_close(geo.rel_error, 0.5 / (tok + r).norm(dim=-1))
    assert (geo.residual_energy == 0).all() and (geo.cos_update < 1).all()
    inside = update_geometry(h, h + 1.5 * tok, h + tok)  # residual along Delta_tok
    torch.testing.assert_close(inside.residual_energy, torch.ones(50, dtype=torch.float64))
    torch.testing.assert_close(inside.residual_angle, torch.zeros(50, dtype=torch.float64), atol=1e-5, rtol=0)


def test_dominant_basis_by_energy():
    d = torch.diag(torch.tensor([10.0, 3.0, 1.0], dtype=torch.float64))
    assert dominant_basis(d, 0.9).shape == (3, 1)  # 100 / 110
    assert dominant_basis(d, 0.95).shape == (3, 2)
    assert dominant_basis(d, 1.0).shape == (3, 3)
    with pytest.raises(ValueError, match=r"energy must be in \(0, 1\]"):
        dominant_basis(d, 0.0)


def test_zero_updates_give_no_nan():
    h = torch.ones(4, 3)
    geo = update_geometry(h, h, h)
    for t in (geo.cos_update, geo.residual_angle, geo.rel_error, geo.residual_energy):
        assert torch.isfinite(t).all()
    with pytest.raises(ValueError, match="must all be"):
        update_geometry(h, h[:2], h)
