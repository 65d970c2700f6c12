"""The PDSF atlas step (the shared tiny atlas run): its tables, sections and headline."""

import re

import pandas as pd

from tlgeo.pdsf.atlas import PDSFBudgets, headline


def test_sections_and_headline(atlas_dir, llama):
    out = atlas_dir
    html = (out / "report.html").read_text()
    layers = pd.read_csv(out / "pdsf_layers.csv")
    assert len(layers) == llama.cfg.n_layers + 1 and (layers["n_prompts"] == 28).all()
    s = pd.read_csv(out / "pdsf_generation_summary.csv")
    assert list(s["condition"]) == ["D", "S", "F_top", "random"] and (s["n"] == 12).all()
    assert "Prediction-anchored subspaces (seed paper 001)" in html and "persistent rotations" in html
    h = headline(out, PDSFBudgets())
    assert h.sentences[0].startswith("PDSF (28 SpecA prompts)") and "immediate divergence" in h.sentences[2]
    assert h.sentences[1].startswith("Single-pass edits at state 1, next-token KL (nats): F_mix")
    sp = pd.read_csv(out / "pdsf_single_pass_summary.csv")
    assert (sp["n_prompts"] == 14).all() and len(sp) == 7
    assert "single-pass edits at the last prompt token" in html and "per prompt the static part is F" in html
    assert any("indication only" in w for w in h.warnings)
    # the rotations table shows what varies (11 columns); the settings and the proxy's base rate are in its caption
    table = html[html.index("10c. PDSF: persistent rotations during generation") :]
    table = table[table.index("<table") : table.index("</table>")]
    assert len(re.findall(r"<th[ >]", table.split("</tr>")[0])) == 11 and "its base rate %" in table
    assert "Same for every row: prompt_set specB" in html
    assert "Base rate of the proxy on the unedited continuations" in html or "cannot tell a frame shift" in html
