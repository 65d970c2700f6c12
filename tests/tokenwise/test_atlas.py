"""The tokenwise atlas step (the shared tiny atlas run): its tables, section and headline."""

import pandas as pd

from tlgeo.report.atlas import STEPS
from tlgeo.tokenwise.atlas import TokenwiseBudgets, headline, patched_layers


def test_the_step_comes_after_the_direction_magnitude_one():
    assert STEPS.index("dirmag") < STEPS.index("tokenwise") < STEPS.index("pdsf")


def test_patched_layers_are_evenly_spaced():
    assert patched_layers(30, 6) == [0, 6, 12, 17, 23, 29]
    assert patched_layers(4, 6) == [0, 1, 2, 3]


def test_section_and_headline(atlas_dir, llama):
    from ..report.conftest import tiny_cfg

    html = (atlas_dir / "report.html").read_text()
    geo = pd.read_csv(atlas_dir / "tokenwise_geometry.csv")
    classes = tiny_cfg(atlas_dir).budgets["tokenwise_classes"]
    assert len(geo) == llama.cfg.n_layers * len(classes) and geo["n_tokens"].iloc[0] >= 150
    corr = pd.read_csv(atlas_dir / "tokenwise_correlation.csv")
    assert set(corr["layer"]) == set(patched_layers(llama.cfg.n_layers, TokenwiseBudgets().tokenwise_patch_layers))
    assert "Tokenwise layer maps (seed paper 002)" in html
    h = headline(atlas_dir, TokenwiseBudgets())
    assert h.sentences[0].startswith("Tokenwise maps (") and "Spearman" in h.sentences[1]
    assert any("indication only" in w for w in h.warnings)  # 12 patched tokens


def test_zero_tokens_skip_the_step():
    from tlgeo.report.atlas import step_config
    from tlgeo.report.registry import load_steps

    from ..report.conftest import tiny_cfg

    cfg = tiny_cfg("unused")
    budgets = cfg.chapter_budgets()
    budgets["tokenwise"].tokenwise_tokens = 0
    assert step_config(load_steps()["tokenwise"], cfg, budgets) is None
