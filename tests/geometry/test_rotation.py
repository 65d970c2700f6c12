"""Subspace edits: rotations keep norms and act only inside their subspace, the identity is a
no-op bit for bit, Haar vs the authors' QR rotation, attenuation and transplant."""

import pytest
import torch

from tlgeo.geometry.rotation import (
    attenuate_in_subspace,
    haar_rotation,
    qr_rotation,
    random_basis,
    replace_in_subspace,
    rotate_in_subspace,
    rotation,
)


def _setup(d=20, k=5):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(7, d, generator=g, dtype=torch.float64)
    b = random_basis(d, k, seed=3)
    return h, b


@pytest.mark.parametrize("kind", ["haar", "qr"])
def test_rotation_keeps_norms_and_the_complement(kind):
    h, b = _setup()
    r = rotation(5, seed=1, kind=kind)
    torch.testing.assert_close(r.T @ r, torch.eye(5, dtype=torch.float64))
    out = rotate_in_subspace(h, b, r)
    torch.testing.assert_close(out.norm(dim=-1), h.norm(dim=-1))
    perp = torch.eye(20, dtype=torch.float64) - b @ b.T
    torch.testing.assert_close(out @ perp, h @ perp)  # nothing outside the subspace moves
    torch.testing.assert_close((out @ b).norm(dim=-1), (h @ b).norm(dim=-1))
    assert (out - h).abs().max() > 1e-3


def test_identity_rotation_is_a_no_op_bit_for_bit():
    h, b = _setup()
    for x in (h, h.float(), h.to(torch.bfloat16)):
        assert torch.equal(rotate_in_subspace(x, b, torch.eye(5, dtype=torch.float64)), x)


def test_haar_rotations_are_proper_and_seeded_and_qr_is_the_authors():
    assert torch.det(haar_rotation(6, 0)) == pytest.approx(1.0)
    assert torch.equal(haar_rotation(6, 4), haar_rotation(6, 4)) and not torch.equal(
        haar_rotation(6, 4), haar_rotation(6, 5)
    )
    q = qr_rotation(6, 2)
    g = torch.randn(6, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    torch.testing.assert_close(q, torch.linalg.qr(g).Q)
    with pytest.raises(ValueError, match="unknown rotation kind"):
        rotation(3, 0, "givens")


def test_attenuate_and_transplant():
    h, b = _setup()
    other = torch.randn(7, 20, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    torch.testing.assert_close(
        attenuate_in_subspace(h, b, 0.0) @ b, torch.zeros(7, 5, dtype=torch.float64), atol=1e-12, rtol=0
    )
    moved = replace_in_subspace(h, b, other, 1.0)
    torch.testing.assert_close(moved @ b, other @ b)
    perp = torch.eye(20, dtype=torch.float64) - b @ b.T
    torch.testing.assert_close(moved @ perp, h @ perp)
    torch.testing.assert_close(replace_in_subspace(h, b, other, 0.0), h)
    avoid = random_basis(20, 3, seed=1)
    assert (random_basis(20, 4, seed=2, avoid=avoid).T @ avoid).abs().max() < 1e-12
    with pytest.raises(ValueError, match=r"the basis must be \[d=20, k\]"):
        rotate_in_subspace(h, b[:10], torch.eye(5))
