"""The tokenwise atlas step: its CSVs, section and headline on a tiny model, and the reuse of its CSVs."""

import pandas as pd

from tlgeo.report.atlas import STEPS, AtlasConfig, run_atlas
from tlgeo.tokenwise.atlas import TokenwiseBudgets, headline, patched_layers


def test_the_step_comes_after_the_direction_magnitude_ones():
    assert STEPS.index("dirmag_probes") < STEPS.index("tokenwise") < STEPS.index("pdsf")


def test_patched_layers_are_evenly_spaced():
    assert patched_layers(30, 6) == [0, 6, 12, 17, 23, 29]
    assert patched_layers(4, 6) == [0, 1, 2, 3]


def test_step_writes_its_csvs_section_and_headline(tmp_path, llama, monkeypatch):
    out = tmp_path / "atlas"
    budgets = dict(tokenwise_tokens=150, tokenwise_seq_len=16, tokenwise_k=8, tokenwise_patch_tokens=12,
                   tokenwise_patch_layers=1, tokenwise_classes=("diag_psd", "linear", "global"))
    cfg = AtlasConfig(model="tiny:llama", out=out, steps=("tokenwise",), budgets=budgets)
    html = run_atlas(cfg, model=llama).read_text()
    geo = pd.read_csv(out / "tokenwise_geometry.csv")
    assert len(geo) == llama.cfg.n_layers * 3 and geo["n_tokens"].iloc[0] >= 150
    corr = pd.read_csv(out / "tokenwise_correlation.csv")
    assert set(corr["layer"]) == {0}  # one patched layer: the first
    assert "Tokenwise layer maps (seed paper 002)" in html
    h = headline(out, TokenwiseBudgets())
    assert h.sentences[0].startswith("Tokenwise maps (") and "Spearman" in h.sentences[1]
    assert any("indication only" in w for w in h.warnings)  # 12 patched tokens

    import tlgeo.tokenwise.atlas as A

    monkeypatch.setattr(A, "tokenwise_analysis", lambda *a, **k: (_ for _ in ()).throw(AssertionError("rerun")))
    run_atlas(cfg, model=llama)  # the CSVs are reused
