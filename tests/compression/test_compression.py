"""Compression diagnosis: pure decomposition, local counterfactual on exactly-known
compressions, bad inputs, llmcompressor on a tiny model (the commands: test_cli.py)."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch

from tlgeo.compression import across_layer_stats, error_energies, perp_wanda_score, prompt_ratios, summarize_layers
from tlgeo.compression.counterfactual import (
    IncompatibleModelsError,
    capture,
    check_compatible,
    diagnose,
    hf_model,
    local_errors,
)
from tlgeo.models import load_model, save_tiny_model


# ---------------------------------------------------------------- pure functions


def test_error_energies_known_parts():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(2, 5, 16, generator=g)
    orth = torch.randn(2, 5, 16, generator=g)
    orth = orth - (orth * base).sum(-1, keepdim=True) / base.pow(2).sum(-1, keepdim=True) * base
    comp = 0.7 * base + 0.3 * orth  # e = -0.3 base + 0.3 orth
    en = error_energies(base, comp, z=base)
    assert torch.allclose(en["e_par"].sqrt(), 0.3 * base.norm(dim=-1), rtol=1e-5)
    assert torch.allclose(en["e_perp"].sqrt(), 0.3 * orth.norm(dim=-1), rtol=1e-4)
    assert torch.allclose(en["e_par"] + en["e_perp"], en["e"], rtol=1e-5)
    assert torch.allclose(en["e_par_z"], en["e_par"], rtol=1e-5)  # z = Delta_base here
    r = prompt_ratios(en, first=0)
    exp_last = 0.3 * (orth[:, -1].norm(dim=-1) / base[:, -1].norm(dim=-1)).numpy()
    assert np.allclose(r["last"]["e_perp"], exp_last, rtol=1e-4)
    assert np.allclose(r["last"]["e_par"], 0.3, rtol=1e-5)
    with pytest.raises(ValueError, match="differ in shape"):
        error_energies(base, comp[:, :3])


def test_no_error_is_zero_not_nan():
    base = torch.randn(1, 4, 8)
    r = prompt_ratios(error_energies(base, base.clone(), base), first=1)
    for tokens in ("last", "all"):
        for k, v in r[tokens].items():
            assert np.all(v == 0), (tokens, k, v)


def test_across_layer_stats_and_summary():
    layers = np.arange(6)
    e_perp = 0.1 * (layers + 1.0)
    e_par = np.array([0.05, 0.01, 0.04, 0.02, 0.03, 0.0])
    rows = []
    for p in range(3):  # identical prompts: SD 0
        for l in layers:
            ep, ea = e_perp[l], e_par[l]
            e = math.hypot(ep, ea)
            rows.append(
                {
                    "method": "m",
                    "mode": "local",
                    "site": "attn",
                    "tokens": "all",
                    "layer": l,
                    "prompt": p,
                    "e": e,
                    "e_par": ea,
                    "e_perp": ep,
                    "e_par_z": 0.0,
                    "e_perp_z": e,
                    "share_perp": ep / e,
                    "share_par": ea / e,
                }
            )
    summ = summarize_layers(pd.DataFrame(rows))
    assert len(summ) == 6 and (summ["e_sd"] == 0).all() and (summ["n_prompts"] == 3).all()
    t = across_layer_stats(summ).iloc[0]
    assert t["rho_e_perp"] == pytest.approx(1.0)
    assert t["r_e_perp"] > 0.99
    assert t["share_perp"] == pytest.approx(np.mean(e_perp / np.hypot(e_perp, e_par)))
    tz = across_layer_stats(summ, ref="z").iloc[0]
    assert tz["share_perp"] == pytest.approx(1.0) and tz["share_par"] == 0.0


def test_perp_wanda_score():
    g = torch.Generator().manual_seed(1)
    W = torch.randn(4, 6, generator=g)
    x = torch.randn(50, 6, generator=g)
    y = torch.randn(50, 4, generator=g)
    S = (x * x).sum(0)
    u2 = (y / y.norm(dim=-1, keepdim=True)) ** 2
    M = u2.t() @ (x * x)
    wanda = W.abs() * S.sqrt()
    assert torch.allclose(perp_wanda_score(W, S), wanda)
    assert torch.allclose(perp_wanda_score(W, S, M, 1.0), wanda)
    perp = perp_wanda_score(W, S, M, 0.0)
    # brute force: perpendicular energy of removing W_ij alone, summed over tokens
    brute = torch.empty_like(W)
    for i in range(4):
        for j in range(6):
            err = torch.zeros(50, 4)
            err[:, i] = -W[i, j] * x[:, j]
            u = y / y.norm(dim=-1, keepdim=True)
            par = (err * u).sum(-1, keepdim=True) * u
            brute[i, j] = (err - par).pow(2).sum().sqrt()
    assert torch.allclose(perp, brute, rtol=1e-4)
    with pytest.raises(ValueError, match="perp_lambda"):
        perp_wanda_score(W, S, M, 1.5)


# ---------------------------------------------------------------- counterfactual on tiny models


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "base", "llama")


@pytest.fixture(scope="module")
def base(tiny_dir):
    return load_model(str(tiny_dir))


@pytest.fixture(scope="module")
def toks():
    t = torch.randint(0, 256, (3, 24), generator=torch.Generator().manual_seed(0))
    t[:, 0] = 256
    return t


def _frame(df, **sel):
    for k, v in sel.items():
        df = df[df[k] == v]
    return df


def test_uncompressed_layer_gives_zero_error(base, tiny_dir, toks):
    df = diagnose(base, {"same": str(tiny_dir)}, toks)
    assert set(df["mode"]) == {"local", "e2e"} and set(df["site"]) == {"attn", "mlp", "block"}
    assert len(df) == 2 * 3 * 3 * 2 * 3  # modes x sites x layers x tokens x prompts
    assert (df[["e", "e_par", "e_perp", "e_par_z", "e_perp_z"]].to_numpy() < 1e-6).all()


def test_a_compressed_directory_loads_where_the_dense_model_is(tiny_dir, toks, tmp_path):
    """In the dense model's dtype (and device, sharding): a bfloat16 model's uncompressed copy has no
    error (loaded in float32 it would differ by bfloat16's rounding)."""
    from tlgeo.models import placement

    bf16 = load_model(str(tiny_dir), dtype="bfloat16")
    assert placement(bf16) == {"device": torch.device("cpu"), "dtype": torch.bfloat16}
    df = diagnose(bf16, {"same": str(tiny_dir)}, toks)
    assert (df[["e", "e_par", "e_perp"]].to_numpy() == 0).all()
    offloaded = {
        "device": None,
        "dtype": torch.float32,
        "device_map": "auto",
        "max_memory": None,
        "offload_folder": str(tmp_path),
    }
    bf16.tlgeo_placement = offloaded  # as load_model(..., offload_folder=tmp_path) records it
    assert placement(bf16, offload_subfolder="wanda")["offload_folder"] == str(tmp_path / "wanda")
    with pytest.raises(ValueError, match="offload_subfolder"):
        placement(bf16)


def test_exactly_known_compression(base, toks):
    """Zero the rows J of o_proj in block 1: locally e = -P_J Delta_attn in block 1 only;
    the MLP of block 1 sees the dense resid_mid (no error); e2e errors start at block 1."""
    comp = copy.deepcopy(base)
    J = torch.arange(0, 64, 3)
    with torch.no_grad():
        hf_model(comp).model.layers[1].self_attn.o_proj.weight[J] = 0
    # expected from TransformerLens' own hook (an independent path to Delta_attn)
    _, cache = base.run_with_cache(toks, names_filter=lambda n: n == "blocks.1.hook_attn_out")
    d = cache["blocks.1.hook_attn_out"].float()  # [b, t, d]
    e = torch.zeros_like(d)
    e[..., J] = -d[..., J]
    alpha = (e * d).sum(-1) / d.pow(2).sum(-1)
    e_par = alpha.unsqueeze(-1) * d
    last = lambda v: (v[:, -1].norm(dim=-1) / d[:, -1].norm(dim=-1)).numpy()  # noqa: E731
    allt = lambda v: (v[:, 1:].pow(2).sum((-1, -2)).sqrt() / d[:, 1:].pow(2).sum((-1, -2)).sqrt()).numpy()  # noqa: E731

    with torch.inference_mode(), capture(base, keep_inputs=True) as cb:
        hf_model(base)(input_ids=toks, use_cache=False)
        df = local_errors(cb, comp, {"method": "zero_rows"})
    a1 = _frame(df, site="attn", layer=1).sort_values("prompt")
    for tokens, f in (("last", last), ("all", allt)):
        got = _frame(a1, tokens=tokens)
        assert np.allclose(got["e"], f(e), rtol=1e-4, atol=1e-6)
        assert np.allclose(got["e_par"], f(e_par), rtol=1e-4, atol=1e-6)
        assert np.allclose(got["e_perp"], f(e - e_par), rtol=1e-4, atol=1e-6)
    assert (_frame(df, site="mlp", layer=1)["e"] < 1e-6).all()  # MLP counterfactual is local
    assert (_frame(df, site="block", layer=1)["e"] > 1e-3).all()
    assert (df[df["layer"] != 1]["e"] < 1e-6).all()

    e2e = diagnose(base, {"zero_rows": comp}, toks, modes=("e2e",))
    assert (_frame(e2e, layer=0)["e"] < 1e-6).all()
    assert (_frame(e2e, layer=2)["e"] > 1e-4).all()  # compounds downstream


def test_scaled_output_is_purely_parallel(base, toks):
    comp = copy.deepcopy(base)
    with torch.no_grad():
        hf_model(comp).model.layers[2].mlp.down_proj.weight.mul_(0.5)
    df = diagnose(base, {"half": comp}, toks, modes=("local",))
    m2 = _frame(df, site="mlp", layer=2)
    assert np.allclose(m2["e_par"], 0.5, atol=1e-5) and (m2["e_perp"] < 1e-5).all()
    assert np.allclose(m2["share_par"], 1.0, atol=1e-4)


def test_bad_inputs(base, tiny_dir, tmp_path, toks):
    gpt2 = load_model("tiny:gpt2")
    with pytest.raises(IncompatibleModelsError, match="model_type"):
        check_compatible(base, gpt2)
    short = save_tiny_model(tmp_path / "short", "llama", num_hidden_layers=2)
    with pytest.raises(IncompatibleModelsError, match="num_hidden_layers"):
        diagnose(base, {"short": str(short)}, toks)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        diagnose(base, {"gone": str(tmp_path / "nope")}, toks)
    with pytest.raises(ValueError, match="unknown mode"):
        diagnose(base, {"same": str(tiny_dir)}, toks, modes=("global",))


# ---------------------------------------------------------------- llmcompressor on a tiny model


def test_llmcompressor_wanda_and_direction_aware(tiny_dir, tmp_path, toks):
    pytest.importorskip("llmcompressor")
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from tlgeo.compression.llmc import MANIFEST, calibration_windows, compress_model, nm_pattern_ok

    calib = calibration_windows(AutoTokenizer.from_pretrained(tiny_dir), n=4, seq_len=32)
    man = compress_model(tiny_dir, "wanda_2_4", tmp_path / "w24", calib=calib)
    assert man["checks"]["pattern_ok"] and man["checks"]["n_weights"] == 3 * 7
    assert json.loads((tmp_path / "w24" / MANIFEST).read_text())["method"] == "wanda_2_4"
    sd = load_file(str(tmp_path / "w24" / "model.safetensors"))
    w = sd["model.layers.0.mlp.up_proj.weight"]
    assert nm_pattern_ok(w, 2, 4) and float((w == 0).float().mean()) == 0.5
    assert not nm_pattern_ok(torch.ones(2, 8), 2, 4)
    bridge = load_model(str(tmp_path / "w24"))  # boots as an ordinary dense model
    assert torch.isfinite(bridge(toks)).all()

    # direction-aware Wanda (lambda = 0) prunes other weights of the residual-writing layers
    # (lambda = 1 gives Wanda's score exactly: test_perp_wanda_score)
    compress_model(tiny_dir, "wanda", tmp_path / "w", calib=calib)
    compress_model(tiny_dir, "wanda_perp", tmp_path / "p0", calib=calib, perp_lambda=0.0)
    w, p0 = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("w", "p0"))
    diff = [k for k in w if not torch.equal(w[k] == 0, p0[k] == 0)]
    # block 0 sees the same inputs: only its residual-writing layers change their masks
    # (later blocks then see other inputs, so all their masks may move)
    block0 = [k for k in diff if k.startswith("model.layers.0.")]
    assert block0 and all(k.endswith(("o_proj.weight", "down_proj.weight")) for k in block0), diff
    assert all(float((p0[k] == 0).float().mean()) == 0.5 for k in diff)
    # the tied embedding / unembedding is never pruned
    dense = load_file(str(tiny_dir / "model.safetensors"))
    assert torch.equal(w["model.embed_tokens.weight"], dense["model.embed_tokens.weight"])
    assert torch.equal(p0["model.embed_tokens.weight"], dense["model.embed_tokens.weight"])
    assert man["checks"]["embedding_sparsity"] < 0.01  # only the zero padding row


def test_quant_grid_check():
    from tlgeo.compression.llmc import check_quant_grid

    g = torch.Generator().manual_seed(0)
    scale = torch.rand(4, 2, generator=g) + 0.1
    zp = torch.randint(-8, 8, (4, 2), generator=g).float()
    q = torch.randint(-8, 8, (4, 16), generator=g).float()
    w = (q.view(4, 2, 8) - zp.view(4, 2, 1)) * scale.view(4, 2, 1)
    ok = check_quant_grid(w.view(4, 16), scale, zp, group_size=8)
    assert ok["grid_ok"] and ok["q_in_range"] and ok["max_distinct_per_group"] <= 16
    bad = check_quant_grid(w.view(4, 16) + 0.3 * scale.repeat_interleave(8, 1), scale, zp, group_size=8)
    assert not bad["grid_ok"]
    with pytest.raises(ValueError, match="multiple of the group size"):
        check_quant_grid(w.view(4, 16), scale, zp, group_size=5)
