"""The direction-vs-magnitude step of the atlas: its CSV, its report section and its headline."""

import pandas as pd

from tlgeo.dirmag.atlas import DirmagBudgets, headline
from tlgeo.report.atlas import STEPS, AtlasConfig, run_atlas


def test_the_steps_are_registered_after_the_decomposition_ones():
    assert list(STEPS[STEPS.index("dirmag_damage"):][:3]) == ["dirmag_damage", "dirmag_blimp", "dirmag_probes"]
    assert STEPS.index("audit") < STEPS.index("dirmag_damage")


def test_step_writes_its_csv_section_and_headline(tmp_path, llama):
    out = tmp_path / "atlas"
    cfg = AtlasConfig(model="tiny:llama", out=out, steps=("dirmag_damage",),
                      budgets=dict(dirmag_sentences=5, dirmag_seeds=2, dirmag_deltas=(0.02,),
                                   dirmag_norm_fractions=(0.5,)))
    html = run_atlas(cfg, model=llama).read_text()
    df = pd.read_csv(out / "dirmag_damage.csv")
    assert len(df) == 2 * 2 * 2 and set(df["kind"]) == {"magnitude", "angle"}  # deltas x kinds x seeds
    assert "Direction vs magnitude (seed paper 003)" in html and "indication only" in html.lower()
    h = headline(out, DirmagBudgets())
    assert h.sentences[0].startswith("Direction vs magnitude: at delta 0.02") and h.warnings


def test_blimp_and_probe_steps(tmp_path, llama):
    out = tmp_path / "atlas"
    budgets = dict(dirmag_seeds=1, dirmag_deltas=(0.05,), dirmag_norm_fractions=(), dirmag_blimp_pairs=2,
                   dirmag_probe_sentences=6, dirmag_probe_layers=2)
    html = run_atlas(AtlasConfig(model="tiny:llama", out=out, steps=("dirmag_blimp", "dirmag_probes"),
                                 budgets=budgets), model=llama).read_text()
    blimp = pd.read_csv(out / "dirmag_blimp.csv")
    assert len(blimp) == 2 * 7 and set(blimp["n"]) == {2, 12}  # kinds x (6 paradigms + pooled)
    probes = pd.read_csv(out / "dirmag_probes.csv")
    assert set(probes["layer"]) == {0, 2} and len(probes) == 2 * 2 * 3
    assert "subject–verb agreement" in html and "what linear probes read" in html
    assert "Probes: the best part-of-speech accuracy" in " ".join(headline(out).sentences)
    assert html.count("<img") >= 2
    skipped = tmp_path / "skipped"
    run_atlas(AtlasConfig(model="tiny:llama", out=skipped, steps=("dirmag_blimp", "dirmag_probes"),
                          budgets={**budgets, "dirmag_blimp_pairs": 0, "dirmag_probe_sentences": 0}), model=llama)
    assert not (skipped / "dirmag_blimp.csv").exists() and not (skipped / "dirmag_probes.csv").exists()


def test_the_headline_follows_the_csv(tmp_path):
    rows = [dict(kind=k, delta=d, seed=42 + s, damage=dmg, delta_over_norm=d / 10, n_sentences=281, relative=False)
            for d, (mag, ang) in {1.0: (0.01, 0.5), 10.0: (2.0, 4.0)}.items()
            for k, dmg in (("magnitude", mag), ("angle", ang)) for s in range(5)]
    pd.DataFrame(rows).to_csv(tmp_path / "dirmag_damage.csv", index=False)
    h = headline(tmp_path)
    assert "does 50.00x the loss damage" in h.sentences[0] and "2.00x" in h.sentences[0] and not h.warnings
    assert not headline(tmp_path / "nowhere")
