"""Normalised effects, their CIs, and attribution vs exact."""

import numpy as np
import pandas as pd
import pytest

from tlgeo.patching.effects import add_qvalues, agreement, effect, effect_ci, effect_test, interactions


def test_effect_is_the_share_of_the_gap_moved():
    clean, corrupted = np.array([3.0, 5.0]), np.array([1.0, 1.0])  # gap 3
    assert effect(corrupted, clean, corrupted, "denoise") == 0
    assert effect(clean, clean, corrupted, "denoise") == 1
    assert effect([2.0, 2.5], clean, corrupted, "denoise") == pytest.approx((2.25 - 1) / 3)
    assert effect(clean, clean, corrupted, "noise") == 0
    assert effect(corrupted, clean, corrupted, "noise") == 1
    assert effect([2.0, 2.5], clean, corrupted, "noise") == pytest.approx((4 - 2.25) / 3)
    assert np.isnan(effect([1.0], [2.0], [2.0], "denoise"))
    with pytest.raises(ValueError, match="unknown direction"):
        effect(clean, clean, corrupted, "both")
    with pytest.raises(ValueError, match="must match"):
        effect([1.0], clean, corrupted, "noise")


def test_effect_ci_covers_the_effect_and_narrows_with_prompts():
    rng = np.random.default_rng(0)
    widths = []
    for n in (10, 1000):
        clean = 3 + rng.normal(size=n)
        corrupted = rng.normal(size=n)
        patched = corrupted + 0.4 * (clean - corrupted) + 0.3 * rng.normal(size=n)
        lo, hi = effect_ci(patched, clean, corrupted, "denoise")
        assert lo <= effect(patched, clean, corrupted, "denoise") <= hi
        widths.append(hi - lo)
    assert widths[1] < widths[0] / 3
    assert 0.35 < lo and hi < 0.45


def test_effect_test_p_value_separates_a_planted_effect_from_none():
    rng = np.random.default_rng(1)
    n = 40
    clean, corrupted = 3 + rng.normal(size=n), rng.normal(size=n)
    real = corrupted + 0.5 * (clean - corrupted) + 0.3 * rng.normal(size=n)
    noise = corrupted + 0.3 * rng.normal(size=n)
    t = effect_test(real, clean, corrupted, "denoise")
    assert (t["ci_low"], t["ci_high"]) == effect_ci(real, clean, corrupted, "denoise")
    assert t["effect"] == effect(real, clean, corrupted, "denoise") and t["se"] > 0 and t["p"] < 1e-6
    assert effect_test(noise, clean, corrupted, "denoise")["p"] > 0.01
    none = effect_test(corrupted, clean, corrupted, "denoise")  # exactly 0 on every prompt
    assert none["effect"] == 0 and none["se"] == 0 and none["p"] == 1
    full = effect_test(clean, clean, corrupted, "denoise")  # exactly 1 on every prompt
    assert full["effect"] == 1 and full["se"] == 0 and 0 < full["p"] < 1e-6  # the t-test of the numerators
    assert full["ci_low"] == pytest.approx(1) and full["ci_high"] == pytest.approx(1)
    undefined = effect_test([1.0, 2.0], [2.0, 2.0], [2.0, 2.0], "denoise")  # zero gap
    assert np.isnan(undefined["effect"]) and undefined["p"] == 1


def test_the_p_value_of_a_handful_of_prompts_is_the_t_test_of_their_numerators_not_a_normal_tail():
    """Eight prompts whose patch moves the metric consistently: the normal (Wald) p from the SE is below
    1e-100; the t-test with 7 degrees of freedom, what eight prompts can say, is about 1e-9."""
    from scipy.stats import ttest_1samp

    from tlgeo.stats.multiple import wald_pvalue

    rng = np.random.default_rng(3)
    clean, corrupted = 4 + 0.1 * rng.normal(size=8), np.zeros(8)
    patched = 2 + 0.06 * rng.normal(size=8)  # half the gap restored on every prompt
    t = effect_test(patched, clean, corrupted, "denoise")
    assert wald_pvalue(t["effect"], t["se"]) < 1e-100  # what a normal reference would say
    exact = ttest_1samp(patched - corrupted, 0.0).pvalue
    assert 1e-12 < t["p"] < 1e-6 and t["p"] == pytest.approx(exact, rel=1e-12)
    noising = effect_test(patched, clean, corrupted, "noise")
    assert noising["p"] == pytest.approx(ttest_1samp(clean - patched, 0.0).pvalue, rel=1e-12)
    assert effect_test([3.0], [4.0], [0.0], "denoise")["p"] == 1  # one prompt: no test


def test_q_values_are_benjamini_hochberg_within_each_family():
    from scipy.stats import false_discovery_control

    rng = np.random.default_rng(0)
    p = np.concatenate([rng.uniform(size=30), [1e-6, 1e-5, 2e-4]])
    df = pd.DataFrame(
        {
            "model": "m",
            "task": "t",
            "prompts": 8,
            "seed": 0,
            "positions": "all",
            "frame": "patched",
            "method": np.where(np.arange(p.size) % 2, "exact", "attribution"),
            "direction": "denoise",
            "component": "head",
            "layer": np.arange(p.size),
            "head": 0,
            "p": p,
        }
    )
    got = add_qvalues(df)
    for _, fam in got.groupby("method"):  # one family per method: BH over its own rows only
        np.testing.assert_allclose(fam["q"], false_discovery_control(fam["p"], method="bh"))
    assert (got["q"] >= got["p"]).all() and (got["significant"] == (got["q"] < 0.05)).all()
    assert not np.allclose(got["q"], false_discovery_control(p, method="bh"))  # not pooled over families
    assert got["significant"].sum() >= 2
    assert add_qvalues(df.assign(p=np.nan))["significant"].sum() == 0  # rows without p: q NaN, not significant
    assert "q" not in add_qvalues(df.drop(columns="p")).columns


def test_agreement_pairs_the_two_methods_cell_by_cell():
    rows = []
    for method, scale in (("exact", 1.0), ("attribution", 2.0)):
        for layer in range(3):
            for head in range(2):
                rows.append(
                    dict(
                        model="m",
                        task="t",
                        prompts=4,
                        seed=0,
                        method=method,
                        direction="denoise",
                        positions="all",
                        frame="patched",
                        component="head",
                        layer=layer,
                        head=head,
                        effect=scale * (layer + 0.1 * head) + (method == "attribution") * (layer == 2),
                    )
                )
    got = agreement(pd.DataFrame(rows))
    assert len(got) == 1
    r = got.iloc[0]
    assert r["pairs"] == 6 and r["spearman"] == pytest.approx(1.0) and 0.9 < r["pearson"] < 1
    assert r["worst_layer"] == 2 and r["max_abs_diff"] == pytest.approx(2 * 2.1 + 1 - 2.1)


def test_interactions_are_what_the_parts_leave_of_the_whole():
    base = dict(
        model="m",
        task="t",
        prompts=4,
        seed=0,
        method="exact",
        direction="denoise",
        positions="all",
        frame="patched",
        layer=0,
        head=1,
    )
    rows = [
        dict(base, component=c, effect=e)
        for c, e in (("head", 0.5), ("head_par", 0.1), ("head_perp", 0.3), ("self", 0.05), ("nonself", 0.45))
    ]
    rows.append(dict(base, component="head", effect=9.0, method="attribution"))  # another method: ignored
    got = interactions(pd.DataFrame(rows)).set_index("split")
    assert set(got.index) == {"head = head_par + head_perp", "head = self + nonself"}
    assert got.loc["head = head_par + head_perp", "interaction"] == pytest.approx(0.1)
    assert got.loc["head = self + nonself", "interaction"] == pytest.approx(0.0)
    assert interactions(pd.DataFrame(rows), method="attribution").empty
