"""Manifold complexity on constructed clouds: a folded curve vs a flat blob, TwoNN on known dimensions."""

import math

import pytest
import torch

from tlgeo.geometry.manifold import curvature_ratio, local_global_pr, twonn_dimension


def _circle_in(d: int, n: int = 300, seed: int = 0) -> torch.Tensor:
    t = 2 * math.pi * torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x = torch.zeros(n, d, dtype=torch.float64)
    x[:, 0], x[:, 1] = torch.cos(t), torch.sin(t)
    return x


def test_a_thin_curve_is_more_folded_than_a_blob():
    curve = _circle_in(10)
    blob = torch.randn(300, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert curvature_ratio(curve) < 0.2 * curvature_ratio(blob)
    local, glob = local_global_pr(curve, k=8)
    assert local < 1.3 and glob == pytest.approx(2.0, rel=0.05)  # locally a line, globally a plane
    assert local_global_pr(blob, k=8)[0] > 3
    assert curvature_ratio(torch.zeros(20, 3)) == 0.0


def test_twonn_recovers_known_dimensions():
    g = torch.Generator().manual_seed(1)
    assert twonn_dimension(_circle_in(12, 400)) == pytest.approx(1, abs=0.3)
    flat = torch.zeros(800, 12, dtype=torch.float64)
    flat[:, :3] = torch.rand(800, 3, generator=g, dtype=torch.float64)
    assert twonn_dimension(flat) == pytest.approx(3, abs=0.6)
    assert math.isnan(twonn_dimension(torch.zeros(10, 3)))  # repeated states: no estimate, no error


def test_bad_input():
    with pytest.raises(ValueError, match="k=8 neighbours need 1 <= k < n=5"):
        curvature_ratio(torch.randn(5, 3))
    with pytest.raises(ValueError, match=r"points must be \[n, d\]"):
        local_global_pr(torch.randn(5), k=2)
