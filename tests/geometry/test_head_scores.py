"""Olsson et al.'s head scores, on patterns and circuits whose answer is known by construction (float64)."""

import pytest
import torch

from tlgeo.geometry.head_scores import copying_score, induction_score, previous_token_score


def _one_hot(n: int, source) -> torch.Tensor:
    """A causal pattern [n, n] whose query q attends to source(q) only."""
    p = torch.zeros(n, n, dtype=torch.float64)
    for q in range(n):
        p[q, source(q)] = 1.0
    return p


def test_a_previous_token_head_an_induction_head_and_a_uniform_one():
    n, period = 21, 10  # BOS, then 10 tokens repeated
    prev = _one_hot(n, lambda q: max(q - 1, 0))
    ind = _one_hot(n, lambda q: q - period + 1 if q >= 1 + period else 0)
    uniform = torch.tril(torch.ones(n, n, dtype=torch.float64))
    uniform = uniform / uniform.sum(-1, keepdim=True)
    pattern = torch.stack([prev, ind, uniform])[None].expand(3, -1, -1, -1)  # [batch, heads, q, k]
    ps, ins = previous_token_score(pattern, start=2), induction_score(pattern, period, offset=1)
    assert ps.dtype == torch.float64
    torch.testing.assert_close(ps[:2], torch.tensor([1.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(ins[:2], torch.tensor([0.0, 1.0], dtype=torch.float64))
    q = torch.arange(2, n, dtype=torch.float64)
    torch.testing.assert_close(ps[2], (1 / (q + 1)).mean())  # a uniform head: 1 / (q + 1) on each
    assert previous_token_score(pattern.float()).dtype == torch.float32
    assert previous_token_score(pattern)[1] == pytest.approx(1 / (n - 1))  # from q = 1: BOS is the previous token


def test_copying_scores_of_a_copying_an_anti_copying_and_a_mixed_head():
    g = torch.Generator().manual_seed(0)
    d, vocab = 6, 40
    w_e = torch.randn(vocab, d, generator=g, dtype=torch.float64)
    w_u = w_e.T.clone()  # tied: W_E W_U is PSD
    rot = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    w_ov = torch.stack(
        [
            torch.eye(d, dtype=torch.float64),
            -torch.eye(d, dtype=torch.float64),
            torch.diag(torch.tensor([1.0, 1, 1, -1, -1, -1], dtype=torch.float64)) @ rot * 0,
        ]
    )
    s = copying_score(w_e, w_ov, w_u)
    torch.testing.assert_close(s[:2], torch.tensor([1.0, -1.0], dtype=torch.float64))
    assert s[2] == 0.0  # a head that writes nothing: 0, not NaN
    with pytest.raises(ValueError, match="do not chain"):
        copying_score(w_e, w_ov[:, :5, :5], w_u)


def test_bad_patterns_and_periods_are_named():
    p = torch.full((1, 2, 5, 5), 0.2)
    with pytest.raises(ValueError, match="batch, heads, query, key"):
        previous_token_score(p[0])
    with pytest.raises(ValueError, match="period"):
        induction_score(p, 1)
    with pytest.raises(ValueError, match="no repeated position"):
        induction_score(p, 5, offset=1)


def test_a_duplicate_token_head_and_attention_to_positions_that_differ_per_sequence():
    from tlgeo.geometry.head_scores import attention_to, duplicate_token_score

    n, period = 20, 10  # 10 tokens repeated, no BOS
    dup = _one_hot(n, lambda q: q - period if q >= period else 0)
    prev = _one_hot(n, lambda q: max(q - 1, 0))
    pattern = torch.stack([dup, prev])[None]  # [1, 2, q, k]
    torch.testing.assert_close(duplicate_token_score(pattern, period), torch.tensor([1.0, 0.0], dtype=torch.float64))
    # per sequence: from the last position to key 3 in one sequence and key 7 in the other
    two = torch.zeros(2, 1, n, n, dtype=torch.float64)
    two[0, 0, -1, 3], two[1, 0, -1, 7], two[1, 0, -1, 2] = 1.0, 0.25, 0.75
    torch.testing.assert_close(
        attention_to(two, torch.tensor([n - 1, n - 1]), torch.tensor([3, 7])),
        torch.tensor([(1.0 + 0.25) / 2], dtype=torch.float64),
    )
    with pytest.raises(ValueError, match="one position per sequence"):
        attention_to(two, torch.tensor([n - 1]), torch.tensor([3, 7]))
