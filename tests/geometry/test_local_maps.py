"""Local tokenwise maps: exact recovery of a known map of each class, completion outside the
neighbours' span, and a cross-token map that no tokenwise class can fit (float64)."""

import pytest
import torch

from tlgeo.geometry.local_maps import LOCAL_MAPS, fit_local, global_linear, local_matrix, tokenwise_fit
from tlgeo.geometry.neighbours import knn

G = torch.Generator().manual_seed(0)
D = 6


def _randn(*shape):
    return torch.randn(*shape, generator=G, dtype=torch.float64)


def _orthogonal(d):
    q, _ = torch.linalg.qr(_randn(d, d))
    return q


KNOWN = {  # a map A of each class (rows: T(q) = q A)
    "diag_psd": torch.diag(torch.rand(D, generator=G, dtype=torch.float64) * 2),
    "linear": torch.eye(D, dtype=torch.float64) + 0.3 * _randn(D, D),
    "lowrank": torch.eye(D, dtype=torch.float64) + _randn(D, 2) @ _randn(2, D) * 0.4,
    "orthogonal": 1.7 * _orthogonal(D),
}


@pytest.mark.parametrize("kind", sorted(KNOWN))
def test_a_known_map_of_each_class_is_recovered(kind):
    a = KNOWN[kind]
    x = _randn(5, 20, D)  # 5 neighbourhoods of k = 20 > d
    q = _randn(5, 3, D)
    params = {"rank": 2, "ridge": 1e-12} if kind == "lowrank" else {"ridge": 1e-12} if kind == "linear" else {}
    got = fit_local(kind, x, x @ a, q, **params)
    torch.testing.assert_close(got, q @ a, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(local_matrix(kind, x, x @ a, **params)[0], a, rtol=1e-6, atol=1e-6)


def test_every_class_recovers_the_identity():
    x = _randn(3, 4, D)  # k < d as well
    q = _randn(3, 2, D)
    for kind in LOCAL_MAPS:
        torch.testing.assert_close(fit_local(kind, x, x.clone(), q), q, rtol=1e-6, atol=1e-6)


def test_completion_outside_the_neighbours_span():
    # neighbours span the first 2 coordinates; the query lies along the last one. Fixed, well-conditioned
    # neighbours: the ridge (1e-6) biases the fit by ~1e-3 for nearly collinear random draws
    x = torch.zeros(1, 3, D, dtype=torch.float64)
    x[0, :, :2] = torch.tensor([[1.0, 0.2], [-0.4, 1.1], [0.9, 0.8]], dtype=torch.float64)
    y = 2.0 * x
    q = torch.zeros(1, 1, D, dtype=torch.float64)
    q[0, 0, -1] = 1.0
    for kind in ("linear", "lowrank", "diag_psd"):
        torch.testing.assert_close(fit_local(kind, x, y, q), q)  # identity off the span
    torch.testing.assert_close(fit_local("orthogonal", x, y, q), 2.0 * q)  # s Q with Q = I off the span
    inside = torch.zeros(1, 1, D, dtype=torch.float64)
    inside[0, 0, :2] = torch.tensor([0.3, -0.8])
    for kind in LOCAL_MAPS:
        torch.testing.assert_close(
            fit_local(kind, x, y, inside, **({"rank": 2} if kind == "lowrank" else {})),
            2.0 * inside,
            rtol=1e-6,
            atol=1e-6,
        )


def test_pool_fit_recovers_a_tokenwise_map_and_not_a_cross_token_one():
    h = _randn(400, D)
    _, nb = knn(h, 30)
    a = KNOWN["linear"]
    exact = tokenwise_fit("linear", h, h @ a, nb)
    torch.testing.assert_close(exact, h @ a, rtol=1e-6, atol=1e-6)
    partner = torch.randperm(400, generator=G)
    cross = h + h[partner]  # each output depends on another token's state
    approx = tokenwise_fit("linear", h, cross, nb)
    rel = (cross - approx).norm(dim=-1) / (cross - h).norm(dim=-1)
    assert rel.median() > 0.5


def test_global_linear():
    x = _randn(200, D)
    a = KNOWN["linear"]
    torch.testing.assert_close(global_linear(x, x @ a), a, rtol=1e-6, atol=1e-6)


def test_bad_input():
    x = _randn(2, 4, D)
    with pytest.raises(ValueError, match="unknown local map class 'mlp2'"):
        fit_local("mlp2", x, x, x)
    with pytest.raises(ValueError, match="shapes must be"):
        fit_local("linear", x, x[:, :2], x)
    with pytest.raises(ValueError, match="rank must be positive"):
        fit_local("lowrank", x, x, x, rank=0)
    with pytest.raises(ValueError, match=r"neighbours must be \[n, k\]"):
        tokenwise_fit("linear", x[0], x[0], torch.zeros(3, 2, dtype=torch.long))


def test_orthogonal_fast_path_equals_the_svd_reference(monkeypatch):
    """k x k polar factor (2k <= d) against the Householder-QR + SVD reference, also on neighbourhoods
    with repeated inputs (merged, still the fast path) and on rank-deficient ones it hands over."""
    from tlgeo.geometry import local_maps as lm

    d, k = 40, 8
    base = 3 * _randn(7, 1, d)
    x = base + 0.5 * _randn(7, k, d)
    y = x @ (torch.eye(d, dtype=torch.float64) + 0.2 * _randn(d, d)) + 0.1 * _randn(7, k, d)
    q = base + 0.5 * _randn(7, 2, d)
    x[0, 2] = x[0, 0]  # a repeated input with another output
    x[1, 1], x[1, 3], x[1, 6] = x[1, 5], x[1, 5], x[1, 0]  # two groups
    x[2, 4] = x[2, 0] + x[2, 1]  # rank-deficient without repeats
    calls = []
    ref = lm._orthogonal_svd
    monkeypatch.setattr(lm, "_orthogonal_svd", lambda *a: calls.append(len(a[0])) or ref(*a))
    got = lm.orthogonal(x, y, q)
    assert calls == [1]  # only the neighbourhood that is rank-deficient without repeats fell back
    torch.testing.assert_close(got, ref(x, y, q), rtol=1e-6, atol=1e-6)  # the reference: polar(C + 1e-10 I)
    x[:, :] = x[:, :1]  # every input the same
    torch.testing.assert_close(lm.orthogonal(x, y, q), ref(x, y, q), rtol=1e-6, atol=1e-6)
    assert calls == [1]  # all on the fast path
    # exact data y = s x Q: recovered on the neighbours' span
    x = base + 0.5 * _randn(7, k, d)
    qt = 1.3 * _orthogonal(d)
    inside = torch.randn(7, 3, k, generator=G, dtype=torch.float64) @ x
    torch.testing.assert_close(lm.orthogonal(x, x @ qt, inside), inside @ qt, rtol=1e-8, atol=1e-8)


def test_fit_locals_and_threads_give_the_class_by_class_results():
    from tlgeo.geometry.local_maps import fit_locals, tokenwise_fits

    d = 24
    h = _randn(90, d)
    out = h @ (torch.eye(d, dtype=torch.float64) + 0.2 * _randn(d, d)) + 0.05 * torch.tanh(h.roll(1, 0))
    _, nb = knn(h, 6)
    kinds = list(LOCAL_MAPS)
    together = fit_locals(kinds, h[nb[:10]], out[nb[:10]], h[:10, None], rank=3, ridge=1e-4)
    for kind in kinds:
        params = {"rank": 3, "ridge": 1e-4} if kind == "lowrank" else {"ridge": 1e-4} if kind == "linear" else {}
        torch.testing.assert_close(together[kind], fit_local(kind, h[nb[:10]], out[nb[:10]], h[:10, None], **params))
    one = tokenwise_fits(kinds, h, out, nb, chunk=16, rank=3, ridge=1e-4)
    two = tokenwise_fits(kinds, h, out, nb, chunk=16, threads=2, rank=3, ridge=1e-4)
    for kind in kinds:
        torch.testing.assert_close(one[kind], two[kind], rtol=0, atol=0)
        torch.testing.assert_close(
            one[kind],
            tokenwise_fit(
                kind,
                h,
                out,
                nb,
                chunk=7,
                **({"rank": 3, "ridge": 1e-4} if kind == "lowrank" else {"ridge": 1e-4} if kind == "linear" else {}),
            ),
        )
    with pytest.raises(ValueError, match="unknown local map class 'mlp'"):
        tokenwise_fits(["linear", "mlp"], h, out, nb)


def test_orthogonal_survives_nearly_repeated_float32_neighbours():
    """A Gram matrix singular up to rounding can pass float32 Cholesky; the result must stay finite
    and match the reference (the states of repeated tokens at layer 0 do this)."""
    from tlgeo.geometry import local_maps as lm

    g = torch.Generator().manual_seed(3)
    x = torch.randn(16, 8, 64, generator=g)
    x[:, 1] = x[:, 0] + 1e-7 * torch.randn(16, 64, generator=g)
    x[:, 2] = x[:, 0]
    y = x + 0.1 * torch.randn(16, 8, 64, generator=g)
    q = x[:, :1] + 0.01 * torch.randn(16, 1, 64, generator=g)
    got = lm.orthogonal(x, y, q)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, lm._orthogonal_svd(x, y, q), rtol=1e-3, atol=1e-3)


def test_orthogonal_on_float32_inputs_matches_the_float64_reference():
    """The fast path accumulates in float64: on float32 neighbourhoods whose map turns the inputs'
    span by nearly 90 degrees (a random rotation in 64 dimensions), and on repeated inputs, it
    agrees with the reference run in float64 on the same numbers."""
    from tlgeo.geometry import local_maps as lm

    g = torch.Generator().manual_seed(5)
    d, k = 64, 8
    x = torch.randn(32, k, d, generator=g)
    x[:8, 3] = x[:8, 0]
    rot = torch.linalg.qr(torch.randn(d, d, generator=g))[0]
    y = 1.1 * x @ rot + 0.05 * torch.randn(32, k, d, generator=g)
    q = x[:, :2] + 0.1 * torch.randn(32, 2, d, generator=g)
    got = lm.orthogonal(x, y, q).double()
    ref = lm._orthogonal_svd(x.double(), y.double(), q.double())
    change = (ref - q.double()).norm(dim=-1)
    assert ((got - ref).norm(dim=-1) / change).max() < 1e-5
