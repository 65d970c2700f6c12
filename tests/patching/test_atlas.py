"""The patching step of the atlas: its CSVs, its report section and its headline."""

import pandas as pd

from tlgeo.patching.atlas import PatchingBudgets, headline
from tlgeo.report.atlas import STEPS, AtlasConfig, run_atlas


def test_the_step_comes_after_pdsf():
    assert STEPS.index("pdsf") < STEPS.index("patching")


def test_step_writes_its_csvs_section_and_headline(tmp_path, llama):
    out = tmp_path / "atlas"
    cfg = AtlasConfig(model="tiny:llama", out=out, steps=("patching",),
                      budgets=dict(patching_tasks=("induction", "ioi"), patching_prompts=4, patching_min_accuracy=0.0))
    html = run_atlas(cfg, model=llama).read_text()
    tasks = pd.read_csv(out / "patching_tasks.csv").set_index("task")
    effects = pd.read_csv(out / "patching_effects.csv")
    assert tasks.loc["induction", "patched"] and not tasks.loc["ioi", "patched"]  # a byte tokenizer has no names
    b = PatchingBudgets(patching_min_accuracy=0.0)
    assert set(effects["method"]) == {"exact", "attribution"}
    assert set(effects.loc[effects["method"] == "exact", "component"]) == set(b.patching_exact_components)
    assert set(effects.loc[effects["method"] == "attribution", "component"]) == set(b.patching_components)
    assert "Geometry-resolved activation patching" in html and "attribution (y) against exact" in html
    assert "var CircuitsVis=" in html and html.count("<img") >= 2
    n_exact = int((effects["method"] == "exact").sum())
    assert "after Benjamini-Hochberg over every component, layer and head: " in html
    assert f"{int(effects.loc[effects['method'] == 'exact', 'significant'].sum())} of {n_exact} exact" in html
    h = headline(out, b)
    assert any(s.startswith("Patching (induction") for s in h.sentences)
    assert any("ioi not patched" in s for s in h.sentences) and h.warnings
