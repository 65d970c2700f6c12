"""One token, four geometries: each quantity is its own analysis's on the same tokens, the relations and
their controls, resumption by block, the command."""

import numpy as np
import pandas as pd
import pytest
import torch

from tests.rerun import changed_corpus_runs
from tlgeo.geometries import ANALYSIS, ATYPICALITY, GeometriesConfig, GeometriesResult, QUANTITIES, relations, run
from tlgeo.geometries.analysis import relation_summary, token_windows
from tlgeo.hooks.perturbation import Perturbation
from tlgeo.stats.correlation import shuffle_within, spearman_matrix

CFG = GeometriesConfig(**{**ANALYSIS.tiny, "batch_size": 2})  # two batches: two draws


@pytest.fixture(scope="module")
def result(llama):
    return run(llama, CFG)


def test_every_quantity_for_every_token_and_block(result, llama):
    t = result.tokens
    layers = CFG.chosen_layers(llama.cfg.n_layers)
    assert sorted(t["layer"].unique()) == layers and len(t) == len(layers) * t["index"].nunique()
    last = t["position"] == CFG.seq_len - 1  # no next token: no loss, no damage
    qs = [q for qs in QUANTITIES.values() for q in qs]
    assert t.loc[~last, qs].notna().all().all() and t.loc[last, ["damage_angle", "damage_magnitude"]].isna().all().all()
    np.testing.assert_allclose(t[["P", "D", "S", "F"]].sum(1), 1.0, atol=1e-5)  # exact mode: orthogonal parts
    final = t[t["layer"] == llama.cfg.n_layers - 1]
    assert (final["lens_rank"] == 0).all()  # the last block's logit lens is the model's own prediction


def test_the_decomposition_quantities_are_the_profiles(result, llama):
    from tlgeo.decomposition.observe import parallel_profile

    layer = CFG.chosen_layers(llama.cfg.n_layers)[0]
    prof = parallel_profile(llama, token_windows(llama, CFG), sites=("attn", "value_excl_self"), layers=[layer])
    prof = prof[prof["pos"] > 0]
    got = result.tokens[result.tokens["layer"] == layer].sort_values("index")
    attn = prof[prof["site"] == "attn"].sort_values(["seq", "pos"])["parallel_ratio"].to_numpy()
    np.testing.assert_allclose(got["attn_par"], attn, rtol=1e-6)
    heads = prof[prof["site"] == "value_excl_self"].groupby(["seq", "pos"])["parallel_ratio"].mean().to_numpy()
    np.testing.assert_allclose(got["excl_self_par"], heads, rtol=1e-6)


def test_the_damage_is_a_full_forward_under_the_batchs_own_draw(result, llama):
    """The resumed, per-batch-drawn perturbation equals a full forward with the same Perturbation; two
    batches get different draws (draw = the batch's first window + 1)."""
    layer = CFG.chosen_layers(llama.cfg.n_layers)[-1]
    w = token_windows(llama, CFG)
    got = result.tokens[result.tokens["layer"] == layer].set_index("index")
    per = CFG.seq_len - 1
    for start in (0, CFG.batch_size):
        toks = w[start : start + CFG.batch_size]
        p = Perturbation("magnitude", CFG.delta, seed=CFG.seed * 1000, layers=layer, relative=True, draw=start + 1)
        with torch.no_grad():
            clean = torch.log_softmax(llama(toks)[:, :-1].float(), -1)
            moved = torch.log_softmax(llama.run_with_hooks(toks, fwd_hooks=p.hooks(llama))[:, :-1].float(), -1)
        nxt = toks[:, 1:, None]
        want = (clean.gather(-1, nxt) - moved.gather(-1, nxt))[..., 0][:, 1:]  # BOS's prediction left out
        idx = [(start + r) * per + c for r in range(len(toks)) for c in range(per - 1)]
        np.testing.assert_allclose(got.loc[idx, "damage_magnitude"], want.flatten().numpy(), rtol=1e-4, atol=1e-5)
    a = Perturbation("angle", 0.2, layers=1, relative=True, draw=1).hooks(llama)
    b = Perturbation("angle", 0.2, layers=1, relative=True, draw=9).hooks(llama)
    toks = w[:2]
    with torch.no_grad():
        assert not torch.allclose(llama.run_with_hooks(toks, fwd_hooks=a), llama.run_with_hooks(toks, fwd_hooks=b))


def test_the_tokenwise_error_is_the_tokenwise_analysis(result, llama, tmp_path):
    from tlgeo.tokenwise import collect_pool
    from tlgeo.tokenwise.analysis import tokenwise_analysis
    from tlgeo.tokenwise.config import TokenwiseConfig

    layer = CFG.chosen_layers(llama.cfg.n_layers)[0]
    pool = collect_pool(llama, token_windows(llama, CFG), tmp_path / "p", dtype="float32")
    tw = tokenwise_analysis(llama, pool, TokenwiseConfig(classes=("linear",), layers=(layer,), k=CFG.k, patch_tokens=4))
    g = tw.geometry.set_index("class").loc["linear"]
    got = result.tokens[result.tokens["layer"] == layer]["tok_error"]
    assert float(torch.tensor(got.to_numpy()).median()) == pytest.approx(float(g["rel_error"]), rel=1e-5)


def test_the_atypicality_is_the_state_norm_and_the_brute_force_knn_distance(result, llama, tmp_path):
    """knn_dist: the mean Euclidean distance of h_l to its k nearest states of other windows (the tokenwise fit's
    neighbours), by brute force on a few tokens; state_norm: ||h_{l+1}||."""
    from tlgeo.tokenwise import collect_pool

    layer = CFG.chosen_layers(llama.cfg.n_layers)[-1]
    pool = collect_pool(llama, token_windows(llama, CFG), tmp_path / "p", dtype="float32")
    h, h_next = (np.asarray(pool.states(l), dtype=np.float64) for l in (layer, layer + 1))
    got = result.tokens[result.tokens["layer"] == layer].set_index("index")
    assert got[list(ATYPICALITY)].notna().all().all()
    for i in (0, 17, len(h) - 1):
        d = np.linalg.norm(h - h[i], axis=1)[pool.window != pool.window[i]]
        assert got.loc[i, "knn_dist"] == pytest.approx(np.sort(d)[: CFG.k].mean(), rel=1e-5)
        assert got.loc[i, "state_norm"] == pytest.approx(np.linalg.norm(h_next[i]), rel=1e-5)


def _planted_tokens(seed=0, n_win=30, per=10):
    """One block of synthetic tokens: F and tok_error both follow knn_dist (plus noise), attn_par and mlp_par
    share a factor of their own; everything else is noise."""
    rng = np.random.default_rng(seed)
    n = n_win * per
    df = pd.DataFrame(
        {
            "layer": 1,
            "index": np.arange(n),
            "window": np.repeat(np.arange(n_win), per),
            "position": np.tile(np.arange(1, per + 1), n_win).astype(float),
            "log_freq": rng.normal(size=n),
            "state_norm": rng.normal(size=n),
            "knn_dist": rng.gamma(2.0, size=n),
            "knn_dist_out": rng.normal(size=n),
        }
    )
    for q in [q for qs in QUANTITIES.values() for q in qs]:
        df[q] = rng.normal(size=n)
    df["F"] = np.log(df["knn_dist"]) + 0.3 * rng.normal(size=n)
    df["tok_error"] = df["knn_dist"] + 0.3 * rng.normal(size=n)
    shared = rng.normal(size=n)
    df["attn_par"], df["mlp_par"] = shared + 0.5 * rng.normal(size=n), shared + 0.5 * rng.normal(size=n)
    return df


def test_a_relation_driven_by_atypicality_survives_the_partial_but_not_the_atypical_partial():
    rel = relations(_planted_tokens(), n_boot=20).set_index(["a", "b"])
    atyp, real = rel.loc[("F", "tok_error")], rel.loc[("attn_par", "mlp_par")]
    assert atyp["rho"] > 0.7 and atyp["rho_partial"] > 0.7 and abs(atyp["rho_partial_atypical"]) < 0.15
    assert real["rho_partial_atypical"] > 0.6  # a relation of its own keeps it
    assert ("F", "knn_dist") not in rel.index and "state_norm" not in set(rel.reset_index()[["a", "b"]].stack())
    s = relation_summary(rel.reset_index()).set_index(["a", "b"])
    assert s.loc[("F", "tok_error"), "partial_atypical"] == pytest.approx(atyp["rho_partial_atypical"])
    assert s.loc[("F", "tok_error"), "significant_bh"] == 1
    # "vanishes" decided by a CI: the atypicality's partial CI holds 0 for the one, excludes it for the other
    assert atyp["atypical_ci_low"] < 0 < atyp["atypical_ci_high"]
    assert real["atypical_ci_low"] > 0 and real["partial_ci_low"] > 0
    assert atyp["partial_ci_low"] <= atyp["rho_partial"] <= atyp["partial_ci_high"]
    within = relation_summary(rel.reset_index(), across=False).set_index(["a", "b"])
    assert s.loc[("F", "tok_error"), "atypical_significant"] == 0
    assert within.loc[("attn_par", "mlp_par"), "atypical_significant"] == 1


def test_q_values_are_over_the_whole_table_and_merging_blocks_recomputes_them(result):
    from scipy.stats import false_discovery_control

    rel = result.relations
    assert rel["p"].between(0, 1).all() and (rel["q_bh"] >= rel["p"] - 1e-12).all()
    np.testing.assert_allclose(rel["q_bh"], false_discovery_control(rel["p"], method="bh"))
    # blocks related apart, then merged: the q-values of the whole, not of each block
    whole = pd.concat([_planted_tokens(0).assign(layer=1), _planted_tokens(1).assign(layer=2)], ignore_index=True)
    want = relations(whole, n_boot=10)
    parts = [GeometriesResult(relations=relations(whole[whole["layer"] == l], n_boot=10)) for l in (1, 2)]
    assert not np.allclose(pd.concat([p.relations for p in parts])["q_bh"], want["q_bh"])  # q per block differs
    pd.testing.assert_frame_equal(GeometriesResult.merge(parts).relations, want)


def test_relations_find_a_planted_relation_and_the_controls_remove_it():
    rng = np.random.default_rng(0)
    n_win, per = 40, 12
    window = np.repeat(np.arange(n_win), per)
    position = np.tile(np.arange(1, per + 1), n_win).astype(float)
    a = rng.normal(size=n_win * per)
    x = np.column_stack(
        [
            a,
            a + 0.5 * rng.normal(size=len(a)),
            position + 0.1 * rng.normal(size=len(a)),
            position + 0.1 * rng.normal(size=len(a)),
        ]
    )
    m = spearman_matrix(x, groups=window, controls=np.column_stack([position, rng.normal(size=len(a))]), n_boot=100)
    # shuffling within windows leaves only what the windows' means share (about 1/12 of the variance here)
    assert m["rho"][0, 1] > 0.8 and m["low"][0, 1] > 0.7 and abs(m["shuffled"][0, 1]) < 0.2
    assert m["rho"][2, 3] > 0.9 and abs(m["partial"][2, 3]) < 0.3  # both only follow the position
    s = shuffle_within(x, window, seed=1)
    for g in range(3):  # each window keeps its own values
        np.testing.assert_allclose(np.sort(s[window == g], 0), np.sort(x[window == g], 0))


def test_relations_table_of_a_block(result):
    rel = result.relations
    qs = [q for qs in QUANTITIES.values() for q in qs]
    assert len(rel) == rel["layer"].nunique() * len(qs) * (len(qs) - 1) // 2
    ok = rel.dropna(subset=["rho"])
    assert ((ok["ci_low"] <= ok["rho"] + 1e-9) & (ok["rho"] <= ok["ci_high"] + 1e-9)).mean() > 0.9
    assert (
        ok["n"]
        == result.tokens["position"]
        .ne(CFG.seq_len - 1)
        .groupby(result.tokens["layer"])
        .sum()
        .reindex(ok["layer"])
        .to_numpy()
    ).all()


def test_a_rerun_resumes_by_block(llama, tmp_path, monkeypatch):
    import tlgeo.geometries.analysis as A

    first = run(llama, CFG, out=tmp_path, units=[("layer", CFG.chosen_layers(llama.cfg.n_layers)[0])])
    calls = []
    real = A._layer_tokens
    monkeypatch.setattr(A, "_layer_tokens", lambda *a, **k: calls.append(a[-1]) or real(*a, **k))
    whole = run(llama, CFG, out=tmp_path)
    assert calls == CFG.chosen_layers(llama.cfg.n_layers)[1:]  # the finished block is read back
    pd.testing.assert_frame_equal(
        whole.tokens[whole.tokens["layer"] == first.tokens["layer"].iloc[0]].reset_index(drop=True),
        first.tokens,
        check_dtype=False,
        rtol=1e-6,
    )


def test_a_corpus_file_changed_under_its_name_is_computed_again(llama, tmp_path, capsys):
    again, fresh, said = changed_corpus_runs(run, llama, CFG, tmp_path, capsys)
    for name in ("tokens", "relations", "summary"):
        pd.testing.assert_frame_equal(again.tables()[name], fresh.tables()[name], check_exact=False, rtol=1e-9)
    assert [line for line in said if line.startswith("recomputed")], said
    saved = GeometriesResult.load(tmp_path / "same")
    assert len(saved.relations) == len(fresh.relations)  # the old text's rows replaced


def test_bad_input_fails_before_any_forward(llama, monkeypatch):
    monkeypatch.setattr(llama, "forward", lambda *a, **k: pytest.fail("ran a forward"))
    with pytest.raises(IndexError, match=r"layer\(s\) 7 out of range"):
        run(llama, CFG.replace(layers=(7,)))
    with pytest.raises(ValueError, match="delta must be in"):
        GeometriesConfig(delta=1.5)
    with pytest.raises(ValueError, match="not blocks of this config"):
        run(llama, CFG, units=[("layer", 0)])
    with pytest.raises(ValueError, match="takes its 32 neighbours from other windows, which hold 15"):
        run(llama, CFG.replace(tokens=30, k=32))


def test_command(tmp_path, capsys):
    from tlgeo.cli import main

    assert (
        main(
            [
                "geometries",
                "--model",
                "tiny:llama",
                "--tokens",
                "60",
                "--seq-len",
                "16",
                "--layer-count",
                "2",
                "--seeds",
                "1",
                "--k",
                "8",
                "--n-boot",
                "20",
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "block x pair correlations" in out and (tmp_path / "geometries_relations.csv").exists()
    assert "Benjamini-Hochberg q < 0.05" in out and "significant_bh" in out and "partial_atypical" in out
    assert "P/D/S/F:" in out and "Indication only: a pool of 4 windows" in out  # 60 tokens in windows of 15
    rel = pd.read_csv(tmp_path / "geometries_relations.csv")  # the saved q: over every block of the run
    np.testing.assert_allclose(rel["q_bh"], __import__("scipy").stats.false_discovery_control(rel["p"]), rtol=1e-9)
