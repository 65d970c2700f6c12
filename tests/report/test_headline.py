"""A model with random weights gets the headline's sentences without their comparisons with the papers."""

import pytest

from tlgeo.report.headline import without_paper

CASES = [  # (a headline sentence of the tiny atlas, the same without the paper)
    (
        "Parallel part: the ratio exceeds 1 in 0 of 15 pairs (median over layers: mlp 0.075; largest 0.757 at "
        "value_full, layer 2); the paper finds that the parallel part dominates (median ratio > 1; Figure 1, "
        "Qwen3-4B), which this model does not show.",
        "Parallel part: the ratio exceeds 1 in 0 of 15 pairs (median over layers: mlp 0.075; largest 0.757 at "
        "value_full, layer 2).",
    ),
    (
        "Exclude-self removal costs −0.927 PPL at s_par = 0, within the paper's band of < 1 PPL point for s_par in "
        "[0, 1].",
        "Exclude-self removal costs −0.927 PPL at s_par = 0.",
    ),
    (
        "Downstream: value_excl_self 0 points (CI 0 to 0; paper −1.51), attn 0 points (CI 0 to 0; paper −2.45) — "
        "paper models: Qwen3-1.7B, 7 tasks (zero-shot).",
        "Downstream: value_excl_self 0 points (CI 0 to 0), attn 0 points (CI 0 to 0).",
    ),
    (
        "Heads: 100 % of heads have a positive alpha (paper: both signs; here almost one sign); 0 of 4 removals "
        "change the loss.",
        "Heads: 100 % of heads have a positive alpha (here almost one sign); 0 of 4 removals change the loss.",
    ),
    (
        "Direction vs magnitude: at delta 5 (2602 %) 1.12x (0.0317 vs 0.0282). The paper: 42.9x at delta 1, "
        "reversed (0.2x at delta 1-2) in RMSNorm TinyLlama.",
        "Direction vs magnitude: at delta 5 (2602 %) 1.12x (0.0317 vs 0.0282).",
    ),
    (
        "Persistent rotations, immediate divergence: D 0 % (paper 64 %), random 0 % (paper 4.5 %).",
        "Persistent rotations, immediate divergence: D 0 %, random 0 %.",
    ),
    (
        "PDSF: persistent rotations on 12 SpecB prompts: indication only (the paper: 80).",
        "PDSF: persistent rotations on 12 SpecB prompts: indication only.",
    ),
    ("The paper: 81.6 vs 29.7 %.", ""),
    ("Patching: 4 induction prompts: indication only.", "Patching: 4 induction prompts: indication only."),
]


@pytest.mark.parametrize("sentence, plain", CASES)
def test_without_paper(sentence, plain):
    assert without_paper(sentence) == plain


def test_the_tiny_atlas_headline_compares_with_no_paper(atlas_dir):
    import re

    html = (atlas_dir / "report.html").read_text()
    block = html[html.index('class="headline"') : html.index("</section>", html.index('class="headline"'))]
    items = [re.sub(r"<[^>]+>", "", x) for x in re.findall(r"<li>(.*?)</li>", block, flags=re.S)]
    assert items and items[0].startswith("tiny:llama is a tiny model with random weights")
    assert not [x for x in items[1:] if "paper" in x.lower()], items
