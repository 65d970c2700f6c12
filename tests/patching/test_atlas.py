"""The patching step of the atlas (the shared tiny atlas run): its tables, section and headline."""

import pandas as pd

from tlgeo.patching.atlas import PatchingBudgets, headline
from tlgeo.report.atlas import STEPS


def test_the_step_comes_after_pdsf():
    assert STEPS.index("pdsf") < STEPS.index("patching")


def test_section_and_headline(atlas_dir):
    out = atlas_dir
    html = (out / "report.html").read_text()
    tasks = pd.read_csv(out / "patching_tasks.csv").set_index("task")
    effects = pd.read_csv(out / "patching_effects.csv")
    assert tasks.loc["induction", "patched"] and not tasks.loc["ioi", "patched"]  # a byte tokenizer has no names
    b = PatchingBudgets(patching_min_accuracy=0.0)
    assert set(effects["method"]) == {"exact", "attribution"}
    assert set(effects.loc[effects["method"] == "exact", "component"]) == set(b.patching_exact_components)
    assert set(effects.loc[effects["method"] == "attribution", "component"]) == set(b.patching_components)
    assert "Geometry-resolved activation patching" in html and "attribution (y) against exact" in html
    assert "var CircuitsVis=" in html and html.count("<img") >= 3
    n_exact = int((effects["method"] == "exact").sum())
    assert "after Benjamini-Hochberg over every component, layer and head: " in html
    assert f"{int(effects.loc[effects['method'] == 'exact', 'significant'].sum())} of {n_exact} exact" in html
    paths = pd.read_csv(out / "patching_paths.csv")  # the tiny atlas sends L0H1 into block 1 and the logits
    assert set(paths["sender_layer"]) == {0} and set(paths["receiver_input"]) == {"q", "k", "v", "logits"}
    assert "induction: path patching, denoise" in html and "the eight largest paths by size" in html
    h = headline(out, b)
    assert any(s.startswith("Patching (induction") for s in h.sentences)
    assert any(s.startswith("Path patching (induction): of ") for s in h.sentences)
    assert any("ioi not patched" in s for s in h.sentences) and h.warnings
