"""BLiMP accuracy under L2-matched perturbations, on a tiny model."""

import pytest

import tlgeo.dirmag.engine as eng
from tlgeo.dirmag.engine import SweepGrid
from tlgeo.dirmag.plots import plot_blimp
from tlgeo.dirmag.syntax import agreement_pairs, blimp_damage
from tlgeo.evals.blimp import AGREEMENT, evaluate_blimp


def test_no_perturbation_no_drop_and_a_clean_accuracy_that_matches_the_eval(llama):
    pairs = agreement_pairs(limit=3, paradigms=AGREEMENT[:2])
    df = blimp_damage(llama, pairs, SweepGrid(deltas=[0.0, 0.1], seeds=2), n_boot=100)
    assert len(df) == 2 * 2 * 2 * 3  # deltas x kinds x seeds x (2 paradigms + pooled)
    assert (df.loc[df["delta"] == 0.0, "drop"] == 0).all()
    clean = evaluate_blimp(llama, AGREEMENT[:2], limit=3, n_boot=100).set_index("paradigm")["accuracy"]
    got = df.drop_duplicates("paradigm").set_index("paradigm")["clean_accuracy"]
    assert got.to_dict() == pytest.approx(clean.to_dict())
    assert set(df["seed"]) == {42, 43} and df["delta_over_norm"].max() > 0
    fig = plot_blimp(df)
    assert {t.get_text() for t in fig.legends[0].get_texts()} >= {"magnitude", "angle", "clean", "chance"}
    with pytest.raises(ValueError, match="no rows for paradigm 'other'"):
        plot_blimp(df, "other")


def test_a_rerun_reads_the_log(llama, tmp_path, monkeypatch):
    pairs = agreement_pairs(limit=2, paradigms=AGREEMENT[:1])
    grid = SweepGrid(deltas=[0.1], kinds=["angle"], seeds=1)
    kw = dict(n_boot=50, log_path=tmp_path / "blimp.jsonl")
    first = blimp_damage(llama, pairs, grid, **kw)

    def boom(*a, **k):
        raise AssertionError("recomputed")

    monkeypatch.setattr(eng, "perturbed_scores", boom)
    again = blimp_damage(llama, pairs, grid, **kw)
    assert again["accuracy"].tolist() == first["accuracy"].tolist()


def test_bad_input(llama):
    with pytest.raises(ValueError, match="no minimal pairs"):
        blimp_damage(llama, [])
    with pytest.raises(ValueError, match="delta must be"):
        blimp_damage(llama, agreement_pairs(limit=1), SweepGrid(deltas=[float("inf")]))
