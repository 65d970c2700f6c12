"""The smallest faithful k: the bisection between the curve's points, exact or within a tolerance."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tlgeo.circuits import circuit

TRUE_K = 3_217  # recovered(k) = min(1, k / TRUE_K * 0.8): reaches 0.8 first at TRUE_K


def _recovered(k: int) -> float:
    return min(1.0, 0.8 * k / TRUE_K) if k < TRUE_K else max(0.8, min(1.0, 0.8 * k / TRUE_K))


@pytest.fixture
def fake_runs(monkeypatch):
    calls = []

    def fake(model, graph, clean, corrupted, metric, order, ks, **kw):
        calls.extend(ks)
        return pd.DataFrame(
            {"k": ks, "share": [k / 50_000 for k in ks], "metric": 0.0, "recovered": [_recovered(k) for k in ks]}
        )

    monkeypatch.setattr(circuit, "faithfulness_curve", fake)
    return calls


def _curve(ks):
    return pd.DataFrame(
        {"k": ks, "share": [k / 50_000 for k in ks], "metric": 0.0, "recovered": [_recovered(k) for k in ks]}
    )


@pytest.mark.parametrize("tolerance", [0.0, 0.02, 0.1, 0.3])
def test_the_bisection_finds_the_smallest_k_within_its_tolerance(fake_runs, tolerance):
    start = _curve([0, 1000, 2000, 5000, 10_000, 50_000])
    got = circuit.smallest_faithful_k(
        None, None, None, None, None, [], start, 0.8, clean_metric=1.0, corrupted_metric=0.0, tolerance=tolerance
    )
    k = circuit.k_at(got, 0.8)
    assert TRUE_K <= k and k - TRUE_K <= tolerance * k
    if tolerance == 0:
        assert k == TRUE_K
    exact_steps = math.ceil(math.log2(5000 - 2000))
    assert len(fake_runs) <= exact_steps and (tolerance == 0 or len(fake_runs) < exact_steps)
