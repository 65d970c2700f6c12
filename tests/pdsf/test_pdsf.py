"""PDSF on a tiny model: prompt sets and encodings, states from one forward per batch, the geometry
tables, the subspace edit as a hook (once per forward, removed after an exception, identity no-op),
persistent rotations with and without the KV cache, divergence steps, bad input."""

import numpy as np
import pandas as pd
import pytest
import torch

from tlgeo.hooks.subspace import SubspaceEdit
from tlgeo.pdsf import (
    condition_bases,
    divergence_step,
    divergence_summary,
    encode_prompts,
    greedy_continuations,
    final_norm_scale,
    last_token_states,
    load_prompt_set,
    logit_lens,
    pdsf_states,
    persistent_rotations,
    run_generation,
    run_geometry,
)
from tlgeo.pdsf.prompts import PromptSet


def _tiny_set(n_groups=3, per=6):
    words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
    texts, groups = [], []
    for g in range(n_groups):
        for v in range(per):
            texts.append(f"{words[g]} {words[(g + v) % 6]} {'x' * (v + 1)} {g}{v}")
            groups.append(f"g{g}")
    return PromptSet("tiny", texts, groups, [f"p{i}" for i in range(len(texts))])


def test_the_papers_prompt_sets_load():
    a, b, d = load_prompt_set("specA"), load_prompt_set("specB"), load_prompt_set("diverse")
    assert len(a) == 224 and len(set(a.groups)) == 14 and len(a.answers) == 224
    assert len(b) == 96 and len(set(b.groups)) == 12 and len(d) == 84 and len(set(d.groups)) == 8
    assert len(a.take(2)) == 28 and a.take(2).groups[:2] == [a.groups[0]] * 2
    with pytest.raises(ValueError, match="unknown prompt set"):
        load_prompt_set("specC")


def test_encoding_records_bos_and_template(llama):
    toks, enc = encode_prompts(llama, ["hello world"], bos=True)
    assert toks[0][0] == llama.tokenizer.bos_token_id and enc.as_dict() == {"template": "raw", "bos": True}
    plain, enc2 = encode_prompts(llama, ["hello world"], bos=False)
    assert len(plain[0]) == len(toks[0]) - 1 and not enc2.bos
    with pytest.raises(ValueError, match="chat template"):
        encode_prompts(llama, ["hi"], template="chat")
    with pytest.raises(ValueError, match="empty prompt set"):
        encode_prompts(llama, [])


@pytest.mark.parametrize("stop_early", [True, False])
def test_states_of_a_right_padded_batch_equal_single_prompt_runs(llama, monkeypatch, stop_early):
    """Batches of sorted lengths, put back in the prompts' order; the forward stopped at the last
    block (readout of the last positions only) or, where the readout is not the model's, a full one."""
    import tlgeo.pdsf.states as states

    monkeypatch.setattr(states, "readout_ok", lambda model, toks: stop_early)
    toks, _ = encode_prompts(llama, ["a b c d e f", "a", "hello there", "x y"], bos=True)
    ps = last_token_states(llama, toks, batch_size=3)
    assert ps.states.shape == (llama.cfg.n_layers + 1, 4, llama.cfg.d_model)
    assert ps.lengths.tolist() == [len(t) for t in toks]
    for i, t in enumerate(toks):
        logits, cache = llama.run_with_cache(t[None])
        torch.testing.assert_close(ps.states[-1, i], cache[f"blocks.{llama.cfg.n_layers - 1}.hook_resid_post"][0, -1])
        torch.testing.assert_close(ps.states[1, i], cache["blocks.0.hook_resid_post"][0, -1])
        torch.testing.assert_close(ps.states[0, i], cache["blocks.0.hook_resid_pre"][0, -1])
        assert ps.predicted[i] == logits[0, -1].argmax() and ps.lens[-1, i] == ps.predicted[i]
    assert torch.equal(last_token_states(llama, toks, batch_size=3, lens=False).states, ps.states)
    assert last_token_states(llama, toks, lens=False).lens is None


def test_readout_cosines_through_the_gram_matrix_equal_the_logit_vectors():
    """The readout alignment through ``W_U W_Uᵀ`` equals the cosines of the ``[n, vocab]`` logit vectors."""
    from tlgeo.pdsf.layer_stats import _readout, logit_gram

    gen = torch.Generator().manual_seed(0)
    d, vocab, n = 12, 1000, 9
    w_u, h = torch.randn(d, vocab, generator=gen), torch.randn(n, d, generator=gen, dtype=torch.float64)
    g = torch.rand(d, generator=gen, dtype=torch.float64) + 0.5
    parts = {
        "P": h * 0.3,
        "D": torch.randn(n, d, generator=gen, dtype=torch.float64),
        "F": torch.zeros(n, d, dtype=torch.float64),
    }
    torch.testing.assert_close(logit_gram(w_u, chunk=300), w_u.double() @ w_u.double().T)
    got = _readout(parts, h, logit_gram(w_u, chunk=300), w_u, g, torch.arange(n))
    full = (h * g) @ w_u.double()
    for p, x in parts.items():
        lx = (x * g) @ w_u.double()
        want = ((lx * full).sum(-1) / (lx.norm(dim=-1) * full.norm(dim=-1)).clamp_min(1e-30)).mean()
        np.testing.assert_allclose(got[p]["readout_cos"], float(want), rtol=1e-9, atol=1e-12)
    assert got["P"]["readout_cos"] == pytest.approx(1.0) and got["F"]["readout_cos"] == 0.0  # zero part: no NaN


def test_geometry_tables(llama):
    st = pdsf_states(llama, _tiny_set(), bos=True)
    g = run_geometry(llama, st, k_D=2, k_S=3, layers=[0, 2, 3])
    assert list(g.layers["layer"]) == [0, 2, 3] and (g.layers["k_D"] == 2).all() and (g.layers["k_S"] == 3).all()
    e = g.layers[[f"energy_{p}" for p in "PDSF"]].sum(1)
    np.testing.assert_allclose(e, 1, atol=1e-9)  # exact mode: orthogonal parts
    assert (g.layers["interface_dim"] == 1 + g.layers["pr_D"] + g.layers["pr_S"]).all()
    assert len(g.parts) == 3 * 4 and g.parts["silhouette"].between(-1, 1).all()
    assert g.layers["group_angle_D"].between(0, 90).all()
    assert set(g.parts.columns) >= {"curvature_ratio", "twonn", "gap_cohens_d", "readout_cos", "logit_share"}
    p = g.parts[g.parts["part"] == "P"]
    # exact mode: only P has a component along u; the tiny model's final norm scale is 1, so the
    # folded readout is u itself and P carries the whole predicted logit
    torch.testing.assert_close(final_norm_scale(llama), torch.ones(llama.cfg.d_model), rtol=0, atol=1e-4)
    np.testing.assert_allclose(p["logit_share"], 1, atol=1e-6)
    assert g.layers["bos"].all() and (g.layers["template"] == "raw").all() and (g.layers["d_model"] == 64).all()
    with pytest.raises(ValueError, match="out of range"):
        run_geometry(llama, st, layers=[9])
    lens = run_geometry(llama, st, k_D=2, k_S=3, layers=[1, 3], prediction="lens", complexity=False)
    final = g.layers.set_index("layer").loc[3]
    assert (lens.layers["prediction"] == "lens").all()
    # at the last state the logit lens is the model's own prediction: the same table row
    np.testing.assert_allclose(lens.layers.set_index("layer").loc[3, "energy_P"], final["energy_P"], rtol=1e-6)
    with pytest.raises(ValueError, match="prediction must be"):
        run_geometry(llama, st, prediction="argmax")


def test_subspace_edit_hook_once_per_forward_identity_and_exceptions(llama, tokens):
    b, d = tokens.shape[0], llama.cfg.d_model
    basis = torch.linalg.qr(torch.randn(d, 4, dtype=torch.float64)).Q.float()[None].expand(b, -1, -1)
    ident = SubspaceEdit(1, basis, rotation=torch.eye(4).expand(b, 4, 4))
    clean = llama(tokens)
    assert torch.equal(llama.run_with_hooks(tokens, fwd_hooks=ident.hooks(llama)), clean)
    calls = []
    e = SubspaceEdit(1, basis, rotation=torch.linalg.qr(torch.randn(4, 4)).Q.expand(b, 4, 4))
    name, fn = e.hooks(llama)[0]
    counted = lambda h, hook: (calls.append(1), fn(h, hook))[1]  # noqa: E731
    out = llama.run_with_hooks(tokens, fwd_hooks=[(name, counted)])
    assert len(calls) == 1 and not torch.allclose(out[:, -1], clean[:, -1])
    torch.testing.assert_close(out[:, :-1], clean[:, :-1])  # only the last position, causally
    with pytest.raises(RuntimeError, match="boom"):
        with llama.hooks(fwd_hooks=[(name, lambda h, hook: (_ for _ in ()).throw(RuntimeError("boom")))]):
            llama(tokens)
    assert torch.equal(llama(tokens), clean)  # nothing left behind
    with pytest.raises(ValueError, match="exactly one of"):
        SubspaceEdit(1, basis)
    with pytest.raises(ValueError, match="out of range"):
        SubspaceEdit(7, basis, factor=0.5).hooks(llama)


def test_persistent_rotation_with_and_without_the_kv_cache(llama):
    ps_ = _tiny_set(2, 4)
    st = pdsf_states(llama, ps_, bos=True)
    cb = condition_bases(st.states.states[2], st.u, ("D", "random"), k_D=3, k_S=2)
    assert cb.rank("D") == 3 and cb.rank("random") == 3
    assert torch.einsum("nd,ndk->nk", st.u.double(), cb.bases["D"]).abs().max() < 1e-10  # exact: D ⟂ own u
    from tlgeo.pdsf.interventions import rotation_edit

    fn = rotation_edit(cb, "D", 2, 42, "haar")
    cached = greedy_continuations(llama, st.tokens, 6, batch_size=3, edit=fn)
    loop = greedy_continuations(llama, st.tokens, 6, batch_size=3, edit=fn, use_cache=False)
    assert torch.equal(cached, loop)
    base = greedy_continuations(llama, st.tokens, 6, batch_size=8)
    assert torch.equal(base, greedy_continuations(llama, st.tokens, 6, batch_size=8, use_cache=False))
    df, gens = persistent_rotations(
        llama,
        st.tokens,
        ps_.groups,
        st.states.states[2],
        st.u,
        layer=2,
        conditions=("D", "S"),
        max_new_tokens=6,
        batch_size=3,
    )
    assert len(df) == 2 * 8 and set(df["condition"]) == {"D", "S"} and (df["kl_first"] >= 0).all()
    assert (df["kl_mean"] > 1e-6).all()  # the rotation does change the predictions
    alone, _ = persistent_rotations(
        llama,
        st.tokens,
        ps_.groups,
        st.states.states[2],
        st.u,
        layer=2,
        conditions=("S",),
        max_new_tokens=6,
        batch_size=3,
    )
    np.testing.assert_allclose(alone["kl_mean"], df[df.condition == "S"]["kl_mean"], rtol=1e-6)  # cached clean KL
    s = divergence_summary(df)
    assert list(s["condition"]) == ["D", "S"] and s["unchanged_pct"].between(0, 100).all()
    with pytest.raises(ValueError, match="unknown subspace 'P'"):
        condition_bases(st.states.states[2], st.u, ("P",))


def test_every_condition_generated_in_one_batch_gives_each_conditions_own_tokens(llama):
    from tlgeo.pdsf.generation import greedy_continuations_each

    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, llama.cfg.d_vocab, (n,), generator=g) for n in (5, 7, 6, 9, 4, 8, 6, 5)]
    d = llama.cfg.d_model

    def rotate(k: int):  # a random rank-k rotation per prompt at block 1: strong enough to change the tokens
        basis = torch.linalg.qr(torch.randn(len(prompts), d, k, generator=g))[0]
        rot = torch.linalg.qr(torch.randn(len(prompts), k, k, generator=g))[0]
        return lambda rows, t: SubspaceEdit(1, basis[torch.as_tensor(rows)], rotation=rot[torch.as_tensor(rows)])

    fns = [None, rotate(d // 2), rotate(d // 4)]  # ranks differ: the stacked bases are padded
    each = greedy_continuations_each(llama, prompts, fns, 8, batch_size=3)
    alone = [greedy_continuations(llama, prompts, 8, batch_size=3, edit=fn) for fn in fns]
    assert len(each) == 3 and all(torch.equal(a, b) for a, b in zip(each, alone))
    assert not torch.equal(each[1], each[0]) and not torch.equal(each[2], each[0])  # the edits do change them
    (plain,) = greedy_continuations_each(llama, prompts, [None], 8, batch_size=3)
    assert torch.equal(plain, alone[0])


def test_stacked_rotations_change_each_row_as_its_own_edit_does():
    g = torch.Generator().manual_seed(0)
    n, d = 3, 8
    basis = lambda k: torch.linalg.qr(torch.randn(n, d, k, generator=g, dtype=torch.float64))[0]  # noqa: E731
    rot = lambda k: torch.linalg.qr(torch.randn(n, k, k, generator=g, dtype=torch.float64))[0]  # noqa: E731
    u = torch.nn.functional.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=-1)
    edits = [SubspaceEdit(2, basis(3), u=u, rotation=rot(3)), None, SubspaceEdit(2, basis(1), rotation=rot(1))]
    stacked = SubspaceEdit.stack(edits, n)
    h = torch.randn(3 * n, 5, d, generator=g, dtype=torch.float64)
    got = stacked.delta(h)
    for i, e in enumerate(edits):
        want = torch.zeros(n, 5, d, dtype=torch.float64) if e is None else e.delta(h[i * n : (i + 1) * n])
        torch.testing.assert_close(got[i * n : (i + 1) * n], want, rtol=0, atol=1e-12)
    assert stacked.basis.shape == (3 * n, d, 3) and stacked.rotation.shape == (3 * n, 3, 3)
    with pytest.raises(ValueError, match="only rotations stack"):
        SubspaceEdit.stack([SubspaceEdit(2, basis(2), factor=0.5)], n)
    with pytest.raises(ValueError, match="one layer"):
        SubspaceEdit.stack([edits[0], SubspaceEdit(1, basis(1), rotation=rot(1))], n)
    with pytest.raises(ValueError, match="every edit is None"):
        SubspaceEdit.stack([None], n)


def test_divergence_step_on_constructed_sequences():
    t = torch.tensor
    assert divergence_step(t([1, 2, 3]), t([1, 2, 3])) is None
    assert divergence_step(t([1, 2, 3]), t([9, 2, 3])) == 0
    assert divergence_step(t([1, 2, 3]), t([1, 2, 4])) == 2
    assert divergence_step(t([1, 2, 3]), t([1, 2])) == 2  # a prefix: the shorter length
    df = pd.DataFrame(
        {
            "condition": "D",
            "rank": 3,
            "identical": [True, False, False],
            "immediate": [False, True, False],
            "divergence_step": [None, 0, 4],
            "frame_shift": [False, True, False],
        }
    )
    s = divergence_summary(df).iloc[0]
    assert s["immediate_pct"] == 50 and s["mean_first_divergence"] == 2 and s["unchanged_pct"] == pytest.approx(100 / 3)
    # Wilson's interval of 1 of 2: (p + z²/2n ± z sqrt(p(1-p)/n + z²/4n²)) / (1 + z²/n), by hand
    z, n, p = 1.959963984540054, 2, 0.5
    mid, half = (
        (p + z * z / (2 * n)) / (1 + z * z / n),
        z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n),
    )
    assert s["immediate_ci_low"] == pytest.approx(100 * (mid - half)) and s["immediate_ci_high"] == pytest.approx(
        100 * (mid + half)
    )


def test_generation_is_resumed_condition_by_condition(llama, tmp_path, monkeypatch):
    st = pdsf_states(llama, _tiny_set(2, 4), bos=True)
    kw = dict(conditions=("D", "random"), layer=2, max_new_tokens=4, batch_size=4, log_path=tmp_path / "g.jsonl")
    res = run_generation(llama, st, **kw)
    assert len(res.rows) == 16 and len(res.summary) == 2
    assert (
        list(res.dynamics["layer"]) == list(range(1, llama.cfg.n_layers + 1))
        and len(res.steps) == 4 * llama.cfg.n_layers
    )
    import tlgeo.pdsf.analysis as A

    stop = lambda *a, **k: (_ for _ in ()).throw(AssertionError("rerun"))  # noqa: E731
    monkeypatch.setattr(A, "persistent_rotations", stop)
    monkeypatch.setattr(A, "f_dynamics", stop)
    again = run_generation(llama, st, **kw)
    pd.testing.assert_frame_equal(again.rows, res.rows)
    pd.testing.assert_frame_equal(again.dynamics, res.dynamics)


@pytest.mark.real
def test_smollm2_specA_states_decompose_exactly(smollm2):
    """On the real model: the final state's logit lens is the model's prediction, and the exact split
    of real states is orthogonal and complete."""
    from tlgeo.geometry.subspaces import fit_pdsf, split_pdsf

    st = pdsf_states(smollm2, load_prompt_set("specA").take(2))
    assert torch.equal(logit_lens(smollm2, st.states.states)[-1], st.states.predicted)
    h, u = st.states.states[20].double(), st.u.double()
    parts = split_pdsf(h, u, fit_pdsf(h, u))
    torch.testing.assert_close(sum(parts.values()), h)
    rel = (parts["D"] * parts["F"]).sum(-1).abs() / (h * h).sum(-1)
    assert rel.max() < 1e-10


def test_plots_draw_and_refuse_empty_tables(llama):
    from tlgeo.pdsf.plots import plot_complexity, plot_discrimination, plot_divergence, plot_energy_pr

    st = pdsf_states(llama, _tiny_set(), bos=True)
    g = run_geometry(llama, st, k_D=2, k_S=2)
    assert len(plot_energy_pr(g.layers).axes) == 2
    assert len(plot_complexity(g.parts).axes) == 2 and len(plot_discrimination(g.parts).axes) == 2
    df = pd.DataFrame(
        {
            "condition": ["D", "D", "S"],
            "divergence_step": [0, None, 3],
            "identical": [False, True, False],
            "rank": [2, 2, 3],
        }
    )
    assert len(plot_divergence(df).axes) == 2
    with pytest.raises(ValueError, match="needs a non-empty table"):
        plot_energy_pr(pd.DataFrame())


def test_frame_shift_proxy_and_its_base_rate():
    from tlgeo.pdsf.interventions import frame_shift_base_rate, frame_shifts

    texts = [
        "the cat sat on the mat",
        "a cat and a mat",
        "the cat purrs on a mat",
        "stocks fell in the market",
        "the market and stocks",
        "bonds and stocks rose",
    ]
    groups = ["pets"] * 3 + ["money"] * 3
    assert frame_shift_base_rate(texts, groups) == 0.0
    assert frame_shift_base_rate(texts, ["pets", "pets", "money", "money", "money", "pets"]) >= 2 / 6  # mislabelled
    shifted = frame_shifts(texts, ["stocks in the market"] + texts[1:], groups)
    assert shifted.tolist() == [True] + [False] * 5
    # prompt 0's own unedited text is left out of its group's centroid: a copy of it is not "in frame" for free
    assert frame_shifts(texts, texts, groups).tolist() == [False] * 6
    assert frame_shift_base_rate(["", ""], ["a", "b"]) == 0.0  # no words: nothing to flag
    with pytest.raises(ValueError, match="must match"):
        frame_shifts(texts, texts[:2], groups)


def test_the_states_of_a_subset_of_the_prompts_are_the_geometrys(llama):
    import tlgeo.pdsf.analysis as A
    from tlgeo.pdsf.config import PDSFConfig

    cfg = PDSFConfig(geometry_per_group=2, single_pass_per_group=1, bos="yes")
    geo = A.stage_states(llama, cfg, "geometry")
    fresh = A.stage_states(llama, cfg, "single_pass", geo)  # not the same prompts: computed afresh
    assert fresh is not geo and len(fresh.prompts) == 14
    shared = geo.subset(cfg.single_pass_prompts())  # what the atlas's single pass runs on
    assert shared.prompts.ids == fresh.prompts.ids
    assert [t.tolist() for t in shared.tokens] == [t.tolist() for t in fresh.tokens]
    torch.testing.assert_close(shared.states.states, fresh.states.states)  # other batch-mates: float noise at most
    assert torch.equal(shared.states.predicted, fresh.states.predicted) and torch.equal(shared.u, fresh.u)
    other = A.PDSFStates(
        load_prompt_set("specB").take(1), *(getattr(geo, f) for f in ("tokens", "encoding", "states", "u", "fold_norm"))
    )
    assert other.subset(cfg.single_pass_prompts()) is None  # not among them: another prompt set


def test_a_prompt_set_changed_under_its_name_is_computed_again(llama, tmp_path, capsys, monkeypatch):
    """The prompt set's texts change (e.g. a newer data folder) while its name stays: every stage's rows are
    computed again, equal to a fresh folder's, and the rerun says so."""
    import dataclasses

    import pandas as pd

    import tlgeo.pdsf.config as config_module
    from tlgeo.pdsf import PDSFConfig
    from tlgeo.pdsf.analysis import ANALYSIS, run

    cfg = PDSFConfig(**ANALYSIS.tiny)
    run(llama, cfg, out=tmp_path / "same")
    real = config_module.load_prompt_set

    def reworded(name):
        got = real(name)
        return dataclasses.replace(got, texts=[f"In short, {t}" for t in got.texts])

    monkeypatch.setattr(config_module, "load_prompt_set", reworded)
    capsys.readouterr()
    again = run(llama, cfg, out=tmp_path / "same")
    said = capsys.readouterr().out.splitlines()
    fresh = run(llama, cfg, out=tmp_path / "fresh")
    for name, df in fresh.tables().items():
        pd.testing.assert_frame_equal(again.tables()[name], df, obj=name)
    assert [line for line in said if line.startswith("recomputed")], said
