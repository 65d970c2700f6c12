"""The direction-vs-magnitude step of the atlas (the shared tiny atlas run): its sections and headline."""

import pandas as pd

from tlgeo.dirmag.atlas import DirmagBudgets, headline
from tlgeo.report.atlas import STEPS


def test_the_step_comes_after_the_decomposition_ones():
    assert STEPS.index("audit") < STEPS.index("dirmag") < STEPS.index("tokenwise")


def test_sections_and_headline(atlas_dir):
    html = (atlas_dir / "report.html").read_text()
    df = pd.read_csv(atlas_dir / "dirmag_damage.csv")
    assert len(df) == 2 * 3 and set(df["kind"]) == {"magnitude", "angle"}  # kinds x (delta 5 + 2 norm fractions)
    for title in ("Direction vs magnitude (seed paper 003)", "subject–verb agreement", "what linear probes read"):
        assert title in html
    assert "indication only" in html.lower()
    probes = pd.read_csv(atlas_dir / "dirmag_probes.csv")
    assert set(probes["layer"]) == {0, 2} and len(probes) == 2 * 2 * 3
    h = headline(atlas_dir, DirmagBudgets())
    assert h.sentences[0].startswith("Direction vs magnitude: at delta") and h.warnings
    assert "Probes: the best part-of-speech accuracy" in h.sentences[1]


def test_zero_budgets_leave_only_the_damage():
    b = DirmagBudgets(dirmag_blimp_pairs=0, dirmag_probe_sentences=0)
    assert b.config().parts() == ("damage",)


def test_the_headline_follows_the_csv(tmp_path):
    rows = [
        dict(kind=k, delta=d, seed=42 + s, damage=dmg, delta_over_norm=d / 10, n_sentences=281, relative=False)
        for d, (mag, ang) in {1.0: (0.01, 0.5), 10.0: (2.0, 4.0)}.items()
        for k, dmg in (("magnitude", mag), ("angle", ang))
        for s in range(5)
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "dirmag_damage.csv", index=False)
    h = headline(tmp_path)
    assert "does 50.00x the loss damage" in h.sentences[0] and "2.00x" in h.sentences[0] and not h.warnings
    assert not headline(tmp_path / "nowhere")
