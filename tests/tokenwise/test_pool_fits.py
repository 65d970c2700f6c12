"""State pools (bridge and plain HF models, resumable) and per-layer tokenwise fits, on tiny models."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from tlgeo.tokenwise import CLASSES, StatePool, collect_pool, layer_geometry, layer_list, neighbours


def _windows(n=6, seq=12, vocab=200, seed=0):
    return torch.randint(1, vocab, (n, seq), generator=torch.Generator().manual_seed(seed))


def test_bridge_pool_holds_the_residual_stream(tmp_path, llama):
    w = _windows()
    pool = collect_pool(llama, w, tmp_path / "p", dtype="float32", batch_size=4)
    assert pool.n_layers == llama.cfg.n_layers and pool.n_tokens == 6 * 11  # BOS position left out
    _, cache = llama.run_with_cache(w[:1])
    for l, name in [(0, "blocks.0.hook_resid_pre"), (2, "blocks.1.hook_resid_post")]:
        np.testing.assert_allclose(pool.states(l)[:11], cache[name][0, 1:].numpy(), rtol=1e-5, atol=1e-5)
    assert list(pool.window[:12]) == [0] * 11 + [1] and list(pool.position[:3]) == [1, 2, 3]
    with pytest.raises(ValueError, match="out of range"):
        pool.pair(pool.n_layers)


def test_plain_hf_model_pool_uses_its_layer_list(tmp_path):
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(
        vocab_size=200,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    assert len(layer_list(model)) == 2
    w = _windows(n=3, seq=8)
    pool = collect_pool(model, w, tmp_path / "hf", dtype="float32")
    out = model(input_ids=w, output_hidden_states=True).hidden_states
    np.testing.assert_allclose(pool.states(0)[:7], out[0][0, 1:].detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(pool.states(1)[:7], out[1][0, 1:].detach().numpy(), rtol=1e-5, atol=1e-5)
    # the last state is the last layer's own output, before the final norm (hidden_states[-1] is after it)
    assert not np.allclose(pool.states(2)[:7], out[2][0, 1:].detach().numpy(), atol=1e-3)


def test_collection_resumes_and_refuses_other_settings(tmp_path, llama, monkeypatch):
    import tlgeo.tokenwise.pool as P

    w = _windows()
    d = tmp_path / "p"
    calls = []
    real = P._states_bridge

    def flaky(model, tokens):
        calls.append(len(tokens))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(model, tokens)

    monkeypatch.setattr(P, "_states_bridge", flaky)
    with pytest.raises(KeyboardInterrupt):
        collect_pool(llama, w, d, batch_size=2)
    with pytest.raises(ValueError, match="incomplete"):
        StatePool.open(d)
    monkeypatch.setattr(P, "_states_bridge", real)
    pool = collect_pool(llama, w, d, batch_size=2)
    fresh = collect_pool(llama, w, tmp_path / "fresh", batch_size=2)
    np.testing.assert_array_equal(pool.states(1), fresh.states(1))
    with pytest.raises(ValueError, match="other settings"):
        collect_pool(llama, _windows(seed=1), d)


def test_layer_geometry_table(tmp_path, llama):
    pool = collect_pool(llama, _windows(n=8, seq=16), tmp_path / "p", dtype="float32")
    df = layer_geometry(pool, [0, 1], k=12)
    assert len(df) == 2 * len(CLASSES) and set(df["class"]) == set(CLASSES)
    assert df["cos_update"].between(-1, 1).all() and (df["rel_error"] >= 0).all()
    nb = neighbours(pool, 0, 12)
    assert not (torch.from_numpy(pool.window)[nb] == torch.from_numpy(pool.window)[:, None]).any()
    assert any(p.name.startswith("neighbours_l0_k12") for p in pool.directory.iterdir())  # cached


def test_a_state_space_model_through_plain_module_hooks(tmp_path):
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    model = MambaForCausalLM(
        MambaConfig(vocab_size=200, hidden_size=32, state_size=4, num_hidden_layers=2, expand=2, conv_kernel=4)
    ).eval()
    w = _windows(n=4, seq=10)
    pool = collect_pool(model, w, tmp_path / "mamba", dtype="float32")
    assert pool.n_layers == 2 and pool.d_model == 32
    out = model(input_ids=w, output_hidden_states=True).hidden_states  # Mamba's: block outputs, then norm_f
    np.testing.assert_allclose(pool.states(1)[:9], out[0][0, 1:].detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(pool.states(2)[:9], out[1][0, 1:].detach().numpy(), rtol=1e-4, atol=1e-5)
    emb = model.backbone.embeddings(w[:1])[0, 1:].detach().numpy()
    np.testing.assert_allclose(pool.states(0)[:9], emb, rtol=1e-5, atol=1e-6)
    df = layer_geometry(pool, [1], classes=("diag_psd", "linear"), k=8)
    assert len(df) == 2 and np.isfinite(df["rel_error"]).all()
    # patching through a forward hook on the layer: the clean state changes nothing, a patch of
    # position p changes nothing before p, and the whole analysis runs
    from tlgeo.tokenwise import tokenwise_analysis
    from tlgeo.tokenwise.output_kl import patch_kl

    idx = np.array([3, 12, 25])
    clean = {1: torch.from_numpy(np.array(pool.states(2)[idx]))}
    assert patch_kl(model, pool, idx, clean)["kl_following"].max() < 1e-6
    got = patch_kl(model, pool, idx, {1: clean[1] + 1.0})
    assert (got["kl"] > 1e-6).all() and (got["kl_following"] >= got["kl"] - 1e-9).all()
    res = tokenwise_analysis(model, pool, layers=[0, 1], classes=("linear",), k=8, patch_tokens=6, n_boot=50)
    assert len(res.tokens) == 12 and np.isfinite(res.tokens["kl"]).all()


def test_patching_kl_equals_a_full_forward_and_vanishes_for_the_clean_state(tmp_path, llama):
    from tlgeo.tokenwise.output_kl import patch_kl

    w = _windows(n=4, seq=10)
    pool = collect_pool(llama, w, tmp_path / "p", dtype="float32")
    idx = np.array([0, 5, 12, 30])
    clean = {l: torch.from_numpy(np.array(pool.states(l + 1)[idx])) for l in range(pool.n_layers)}
    df = patch_kl(llama, pool, idx, clean, batch_size=3)
    assert len(df) == 4 * pool.n_layers and df["kl_following"].max() < 1e-5  # the clean state: nothing changes
    g = torch.Generator().manual_seed(0)
    noise = {1: clean[1] + torch.randn(clean[1].shape, generator=g)}
    got = patch_kl(llama, pool, idx, noise, batch_size=3).set_index("index")
    for j, i in enumerate(idx):  # the same patch as a full forward
        win, pos = int(pool.window[i]), int(pool.position[i])

        def put(h, hook, j=j, pos=pos):
            h = h.clone()
            h[0, pos] = noise[1][j]
            return h

        with torch.no_grad():
            ref = torch.log_softmax(llama(w[win : win + 1])[0], -1)
            pat = torch.log_softmax(
                llama.run_with_hooks(w[win : win + 1], fwd_hooks=[("blocks.1.hook_resid_post", put)])[0], -1
            )
        kl = (ref.exp() * (ref - pat)).sum(-1)
        assert got.loc[i, "kl"] == pytest.approx(float(kl[pos]), rel=1e-4, abs=1e-6)
        assert got.loc[i, "kl_following"] == pytest.approx(float(kl[pos:].sum()), rel=1e-4, abs=1e-6)
        assert float(kl[:pos].abs().max() if pos else 0) < 1e-6  # earlier positions cannot change
    with pytest.raises(ValueError, match="out of range"):
        patch_kl(llama, pool, idx, {9: clean[0]})


def test_patch_sets_share_each_batch_clean_forward_and_equal_one_call_per_set(tmp_path, llama, monkeypatch):
    from tlgeo.tokenwise.output_kl import patch_kl, patch_kl_sets

    pool = collect_pool(llama, _windows(n=4, seq=10), tmp_path / "p", dtype="float32")
    idx = np.array([0, 5, 12, 30, 33])
    g = torch.Generator().manual_seed(1)
    sets = {
        c: {
            l: torch.from_numpy(np.array(pool.states(l + 1)[idx]))
            + s * torch.randn(len(idx), pool.d_model, generator=g)
            for l in (0, 1)
        }
        for c, s in (("a", 0.5), ("b", 2.0))
    }
    alone = {c: patch_kl(llama, pool, idx, reps, batch_size=2) for c, reps in sets.items()}
    calls = []
    clean_forward = type(llama).run_with_cache
    monkeypatch.setattr(
        type(llama), "run_with_cache", lambda self, *a, **k: calls.append(1) or clean_forward(self, *a, **k)
    )
    both = patch_kl_sets(llama, pool, idx, sets, batch_size=2)
    assert len(calls) == 3  # one clean forward per batch of 2 rows, not one per set
    assert list(both["set"].unique()) == ["a", "b"]
    for c, df in alone.items():
        pd.testing.assert_frame_equal(both[both["set"] == c].drop(columns="set").reset_index(drop=True), df)
    assert not np.allclose(alone["a"]["kl"], alone["b"]["kl"])  # the sets differ: it is not one set twice


def test_analysis_tables_and_resume(tmp_path, llama, monkeypatch):
    import tlgeo.tokenwise.analysis as A

    pool = collect_pool(llama, _windows(n=8, seq=16), tmp_path / "p", dtype="float32")
    kw = dict(
        layers=[0, 2],
        classes=("diag_psd", "linear", "global"),
        k=10,
        patch_tokens=24,
        n_boot=50,
        log_path=tmp_path / "log.jsonl",
    )
    res = A.tokenwise_analysis(llama, pool, **kw)
    assert len(res.geometry) == 2 * 3 and len(res.tokens) == 2 * 3 * 24
    assert len(res.correlation) == 2 * 3 * 2 and res.correlation["spearman"].between(-1, 1).all()
    assert (res.tokens["kl"] >= 0).all() and (res.tokens["kl_following"] >= res.tokens["kl"] - 1e-9).all()

    import json

    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    (tmp_path / "geo.jsonl").write_text("\n".join(l for l in lines if json.loads(l)["stage"] == "geometry") + "\n")
    resumed = A.tokenwise_analysis(llama, pool, **{**kw, "log_path": tmp_path / "geo.jsonl"})  # patching redone
    pd.testing.assert_frame_equal(resumed.tokens, res.tokens)  # from subset fits recomputed alone

    def boom(*a, **k):
        raise AssertionError("recomputed")

    one = A.tokenwise_analysis(llama, pool, **kw, patch_layers=[2])  # geometry from the log, patching anew
    assert set(one.tokens["layer"]) == {2} and set(one.correlation["layer"]) == {2}
    pd.testing.assert_frame_equal(
        one.tokens.reset_index(drop=True), res.tokens[res.tokens["layer"] == 2].reset_index(drop=True), check_like=True
    )
    with pytest.raises(ValueError, match="subset of the fitted layers"):
        A.tokenwise_analysis(llama, pool, **kw, patch_layers=[1])

    monkeypatch.setattr(A, "patch_kl_sets", boom)
    monkeypatch.setattr(A, "tokenwise_outputs", boom)
    monkeypatch.setattr(A, "layer_outputs", boom)
    again = A.tokenwise_analysis(llama, pool, **kw)  # everything from the log
    pd.testing.assert_frame_equal(again.correlation, res.correlation)
    from tlgeo.tokenwise.plots import plot_error_vs_kl, plot_layer_geometry, plot_residual_angles

    assert len(plot_layer_geometry(res.geometry).axes) == 3
    fig = plot_error_vs_kl(res.tokens, res.correlation, layer=2)
    assert any("rho" in t.get_text() for t in fig.legends[0].get_texts())
    assert plot_residual_angles(res.tokens).axes[0].get_xlim()[1] >= 180
    with pytest.raises(ValueError, match="unknown map class"):
        A.tokenwise_analysis(llama, pool, classes=("mlp9",))
    with pytest.raises(ValueError, match="out of range"):
        A.tokenwise_analysis(llama, pool, layers=[7])


def test_pool_classes_are_cross_fitted_and_the_mlp_learns_a_nonlinear_tokenwise_map():
    from tlgeo.tokenwise.fits import cross_fit, fit_mlp

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2000, 4, generator=g)
    y = x + torch.tanh(x) ** 2  # tokenwise, and even: no linear map explains any of the update
    windows = np.repeat(np.arange(100), 20)
    mlp = cross_fit(lambda a, b: fit_mlp(a, b, hidden=64, epochs=40, batch_size=64, lr=3e-3, seed=0), x, y, windows)
    err = lambda t: float(((y - t).norm(dim=-1) / (y - x).norm(dim=-1)).median())  # noqa: E731
    lin = cross_fit(lambda a, b: lambda q, m=torch.linalg.lstsq(a, b).solution: q @ m, x, y, windows)
    assert err(lin) > 0.9 and err(mlp) < 0.4
    seen = []

    def spy(a, b):
        seen.append(len(a))
        return lambda q: q

    cross_fit(spy, x, y, windows)
    assert seen == [1000, 1000]  # each fold is predicted by a map fitted on the other half
    with pytest.raises(ValueError, match="at least two windows"):
        cross_fit(spy, x, y, np.zeros(2000, dtype=int))


def test_a_damaged_pool_is_found_and_collected_again(tmp_path, llama, capsys):
    """A finished pool is sealed: a changed byte is found before its states are read, never read as numbers;
    ``collect_pool`` collects it again (and ``StatePool.open`` refuses it in one line)."""
    from tlgeo.storage import CorruptFileError

    w = _windows()
    d = tmp_path / "p"
    pool = collect_pool(llama, w, d, dtype="float32", batch_size=4)
    good = np.array(pool.states(2))
    f = d / "states_2.npy"
    data = bytearray(f.read_bytes())
    data[-5] ^= 0xFF  # one byte of the last state
    f.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=r"the state pool .* is damaged: states_2.npy: its content changed"):
        StatePool.open(d)
    again = collect_pool(llama, w, d, dtype="float32", batch_size=4)
    assert (
        "is damaged (states_2.npy: its content changed since it was sealed): collecting it again"
        in capsys.readouterr().err
    )
    np.testing.assert_array_equal(again.states(2), good)
    with open(d / "index.npy", "r+b") as fh:  # a truncated file: found by its size alone
        fh.truncate(50)
    with pytest.raises(CorruptFileError, match="index.npy: 50 bytes, sealed with"):
        StatePool.open(d)
