"""The tokenwise comparison table (RESULTS §4, scripts/tokenwise_table.py) read from a run's two CSVs."""

from __future__ import annotations

import pandas as pd

from tlgeo.tokenwise.paper import TABLE, comparison_table, paper_column


def _run(folder, cos, ci_low):
    """A run of 6 fitted layers and two classes; ``linear``'s cos_update per layer ``cos``, Spearman's CI lows
    ``ci_low`` at three patched layers."""
    rows = []
    for kind, err in (("linear", [0.2, 0.3, 0.9, 0.7, 0.3, 0.2]), ("diag_psd", [0.9] * 6)):
        for layer in range(6):
            rows.append(
                {
                    "layer": layer,
                    "class": kind,
                    "k": 32,
                    "n_tokens": 4096,
                    "rel_error": err[layer],
                    "cos_update": cos[layer],
                    "share_angle_above_60": 0.5 + 0.05 * layer,
                    "residual_energy": 0.1 * layer,
                }
            )
    pd.DataFrame(rows).to_csv(folder / "tokenwise_geometry.csv", index=False)
    corr = [
        {"layer": l, "class": "linear", "target": t, "spearman": s, "ci_low": lo, "ci_high": 0.99, "n": 64}
        for l, s, lo in zip((0, 2, 4), (0.6, 0.8, 0.9), ci_low)
        for t in ("kl", "kl_following")
    ]
    pd.DataFrame(corr).to_csv(folder / "tokenwise_correlation.csv", index=False)


def test_the_column_is_the_runs_medians_and_ranges(tmp_path):
    _run(tmp_path, [0.5, 0.6, 0.7, 0.8, 0.9, 1.0], ci_low=(0.4, 0.65, 0.75))
    col = paper_column(tmp_path, "linear")
    assert set(col) == set(TABLE)
    assert col["tokens, k, patched tokens x layers"] == "4,096, 32, 64 x 3"
    assert col["rel. error (median over layers)"] == "0.30"  # median of 0.2 0.3 0.9 0.7 0.3 0.2
    assert col["cos(Δ_full, Δ_tok), median [range] over layers"] == "0.750 [0.50, 1.00]"
    assert col["residual > 60° from Δ_tok (median over layers)"] == "62.5 %"
    assert col["residual's energy in Δ_tok's dominant subspace (median)"] == "25.0 %"
    assert col["middle third / rest, rel. error"] == f"{0.8 / 0.25:.2f}"  # layers 2-3 against 0, 1, 4, 5
    assert col["lowest-error class (median rel. error)"] == "linear (0.30)"
    assert col["Spearman(error, KL), median [range] over patched layers"] == "0.80 [0.60, 0.90]"
    assert col["patched layers whose Spearman CI lies above 0.7"] == "1 of 3"


def test_the_table_has_a_column_per_run_and_the_paper_s(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        _run(tmp_path / name, [0.9] * 6, ci_low=(0.1, 0.2, 0.3))
    lines = comparison_table({"A": tmp_path / "a", "B": tmp_path / "b"}).splitlines()
    assert lines[0] == "| `linear` | A | B | paper |" and len(lines) == 2 + len(TABLE)
    assert lines[-1].endswith("| 0 of 3 | 0 of 3 | — |")
