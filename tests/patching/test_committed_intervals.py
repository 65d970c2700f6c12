"""The committed patching tables: an interval excludes 0 exactly when p < 0.05, in every one (Fieller's interval,
tlgeo.stats.ratio; the percentile bootstrap the audit found off 0 beside p >= 0.05 is in none of them)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLES = sorted([*ROOT.glob("results/*/patching_effects.csv"), *ROOT.glob("results/*/patching_paths.csv")])


def disagreements(df: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """The rows whose interval excludes 0 while ``p >= alpha``, or holds 0 while ``p < alpha``."""
    excludes = ~((df["ci_low"] <= 0) & (0 <= df["ci_high"]))
    return df[excludes != (df["p"] < alpha)]


def test_the_check_finds_the_audit_example():
    """L24H4, seed 0 in the audit: interval [-0.2618, -0.0001] beside p 0.10."""
    df = pd.DataFrame({"ci_low": [-0.2618, -0.3, 0.1], "ci_high": [-0.0001, 0.2, 0.4], "p": [0.10, 0.5, 0.01]})
    assert disagreements(df).index.tolist() == [0]


@pytest.mark.parametrize("table", TABLES, ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_an_interval_excludes_zero_exactly_when_p_is_below_005(table):
    df = pd.read_csv(table)
    bad = disagreements(df)
    assert bad.empty, f"{table}: {len(bad)} of {len(df)} rows whose interval and test disagree"
