"""The committed calibration table (scripts/bench_calibration.py) holds what the code and docs say of it."""

from pathlib import Path

import pandas as pd

from tlgeo.patching.effects import CALIBRATED_PROMPTS

TABLE = Path(__file__).resolve().parents[2] / "results" / "calibration" / "calibration.csv"


def smallest_calibrated_n(df: pd.DataFrame, floor: float = 0.93) -> dict[str, int]:
    """Per method, the smallest n from which Fieller's coverage of the tame cells is >= ``floor`` in every case
    at that n and every larger one (the largest n + 1 when none)."""
    f = df[df["interval"] == "fieller"]
    out = {}
    for method, g in f.groupby("method"):
        worst = g.groupby("n")["coverage_tame"].min().sort_index()
        ok = worst >= floor
        out[method] = next((int(n) for n in worst.index if ok.loc[n:].all()), int(worst.index.max()) + 1)
    return out


def test_the_cli_warns_below_the_prompt_counts_the_table_calibrates():
    df = pd.read_csv(TABLE)
    assert not df["dirty"].any() and df["commit"].notna().all()
    assert smallest_calibrated_n(df) == CALIBRATED_PROMPTS


def test_fieller_agrees_with_its_test_and_keeps_false_positives_near_nominal():
    df = pd.read_csv(TABLE)
    f = df[df["interval"] == "fieller"]
    assert (f["agreement"] == 1).all()  # the interval excludes 0 exactly when p < 0.05, in every sample
    assert (f["test_fpr"] <= 0.06).all()  # the mean over the null cells (400 samples each: +-0.01 of noise)
    old = df[df["interval"] == "percentile"]
    assert (old["agreement"] < 1).any() and old["coverage"].min() < f["coverage_tame"].min()


def test_the_smallest_n_is_read_from_coverage_that_holds_from_there_on():
    rows = [("exact", 8, 0.95), ("exact", 16, 0.91), ("exact", 32, 0.94), ("paths", 8, 0.9), ("paths", 16, 0.92)]
    df = pd.DataFrame([{"interval": "fieller", "method": m, "n": n, "coverage_tame": c} for m, n, c in rows])
    assert smallest_calibrated_n(df) == {"exact": 32, "paths": 17}
