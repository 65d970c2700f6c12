"""Direction-aware compression objectives: method names, the mixed error, the
perpendicular refit (float64 against a dense solve), sparsity allocation, and the
llmcompressor subclasses on a tiny model."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from tlgeo.compression.allocation import allocate_sparsity, outlier_ratio, perp_sensitivity
from tlgeo.compression.decompose import mixed_error_energy
from tlgeo.compression.methods import UnknownMethodError, parse_method
from tlgeo.compression.reconstruct import layer_energies, perp_refit
from tlgeo.models import save_tiny_model

# ---------------------------------------------------------------- method names


def test_parse_method():
    s = parse_method("awq")
    assert (s.family, s.bits, s.group_size, s.perp, s.quantizes) == ("awq", 4, 64, False, True)
    s = parse_method("awq_perp_l0.25_w3g32")
    assert (s.perp, s.lam, s.bits, s.group_size, s.kind) == (True, 0.25, 3, 32, "awq_perp")
    assert parse_method("rtn", group_size=192).group_size == 192
    s = parse_method("wanda_2_4")
    assert (s.sparsity, s.mask_structure) == (0.5, "2:4")
    assert parse_method("wanda_s70").sparsity == pytest.approx(0.7)
    assert parse_method("sgpt_perp_4_8").kind == "sgpt_perp"
    assert parse_method("wanda_perp", lam=0.3).lam == 0.3 and parse_method("wanda", lam=0.3).lam == 0.0
    assert parse_method("perpalloc_s60").sparsity == pytest.approx(0.6)
    for bad, part in [
        ("gptq", "family"),
        ("wanda_x", "'x'"),
        ("awq_s50", "no sparsity"),
        ("wanda_w4g64", "no w<bits>"),
        ("owl_perp", "_perp"),
        ("wanda_l0.5", "needs '_perp'"),
        ("awq_perp_l150", "lambda"),
        ("owl_2_4", "unstructured"),
        ("wanda_4_2", "0 < N < M"),
        ("rtn_w5g64", "5-bit"),
        ("wanda_s0", "sparsity"),
        ("wanda_s60_2_4", "contradicts"),
    ]:
        with pytest.raises(UnknownMethodError, match=part):
            parse_method(bad)


# ---------------------------------------------------------------- the mixed error


def test_mixed_error_energy():
    ref = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    out = torch.tensor([[3.0, 4.0, 0.0], [1.0, 0.0, 2.0]], dtype=torch.float64)
    # row 0: e = (1, 4, 0): par 1, perp 16; row 1: zero reference, all of e (5) perpendicular
    for lam, want in ((0.0, 16 + 5), (0.5, 16 + 0.5 + 5), (1.0, 17 + 5)):
        s, n = mixed_error_energy(ref, out, lam)
        assert float(s) == pytest.approx(want) and n == 6
    s1, _ = mixed_error_energy(ref.float(), out.float(), 1.0)  # lam = 1 is the summed squared error
    assert float(s1) == pytest.approx(float(torch.nn.functional.mse_loss(out, ref, reduction="sum")))
    s2, _ = mixed_error_energy(ref, out, 2.0)  # the control: parallel error counted twice
    assert float(s2) == pytest.approx(16 + 2 + 5)
    with pytest.raises(ValueError, match="lam"):
        mixed_error_energy(ref, out, -0.1)
    with pytest.raises(ValueError, match="shape"):
        mixed_error_energy(ref, out[:, :2])


# ---------------------------------------------------------------- the perpendicular refit


def _problem(seed, out=6, inp=10, T=40):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(out, inp, generator=g, dtype=torch.float64)
    X = torch.randn(T, inp, generator=g, dtype=torch.float64)
    keep = torch.rand(out, inp, generator=g) > 0.5
    return W, X, keep


@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0, 3.0])
def test_perp_refit_solves_the_masked_problem(lam):
    """CG against the minimiser of the objective written out per token and solved densely."""
    W, X, keep = _problem(0)
    damp = 0.01
    res = perp_refit(W, keep, X, X @ W.t(), lam=lam, damp=damp, iters=500, tol=1e-13, max_iso_increase=1e9)
    U = torch.nn.functional.normalize(X @ W.t(), dim=-1)
    delta = damp * float((X * X).sum(0).mean())

    def f(v):
        V = torch.zeros_like(W).index_put((keep.nonzero()[:, 0], keep.nonzero()[:, 1]), v)
        E = X @ (V - W).t()
        return E.pow(2).sum() - (1 - lam) * (E * U).sum(-1).pow(2).sum() + delta * (V - W)[keep].pow(2).sum()

    zero = torch.zeros(int(keep.sum()), dtype=torch.float64)
    v = torch.linalg.solve(torch.autograd.functional.hessian(f, zero), -torch.autograd.functional.jacobian(f, zero))
    assert torch.allclose(res.weight[keep], v, atol=1e-9)
    assert (res.weight[~keep] == 0).all()
    perp, par = layer_energies(res.weight, W, X, U)
    assert res.perp_after == pytest.approx(perp) and res.par_after == pytest.approx(par)


def test_perp_refit_lowers_perp_and_keeps_the_isotropic_bound():
    for seed in range(8):
        W, X, keep = _problem(seed, out=8, inp=12, T=6)  # fewer tokens than inputs: the parallel part is free
        Y = X @ W.t()
        free = perp_refit(W, keep, X, Y, lam=0.0, damp=1e-6, iters=200, tol=1e-12, max_iso_increase=1e9)
        assert free.perp_after < free.perp_start
        for inc in (0.0, 0.25):
            r = perp_refit(W, keep, X, Y, lam=0.0, damp=1e-6, iters=200, tol=1e-12, max_iso_increase=inc)
            assert r.iso_bound == pytest.approx((1 + inc) * r.iso_mask)
            assert r.iso_after <= r.iso_bound * (1 + 1e-9)
            assert r.perp_after <= r.perp_start * (1 + 1e-9)
            if free.iso_after <= r.iso_bound:  # the guard only acts when the bound binds
                assert r.step == 1.0
            else:
                assert r.step < 1.0
    # a start outside the bound is replaced by the mask
    W, X, keep = _problem(1)
    r = perp_refit(W, keep, X, X @ W.t(), start=W * 10, iters=0)
    assert r.iso_start == pytest.approx(r.iso_mask)


def test_perp_refit_float32_and_bad_input():
    W, X, keep = _problem(2)
    r32 = perp_refit(W.float(), keep, X.float(), (X @ W.t()).float(), iters=100, tol=1e-6, max_iso_increase=1e9)
    r64 = perp_refit(W, keep, X, X @ W.t(), iters=100, tol=1e-10, max_iso_increase=1e9)
    assert r32.weight.dtype == torch.float32
    assert torch.allclose(r32.weight.double(), r64.weight, atol=1e-3)
    Y0 = torch.zeros(X.shape[0], W.shape[0])  # zero outputs: no direction, the whole error is perpendicular
    r0 = perp_refit(W.float(), keep, X.float(), Y0, iters=50)
    assert np.isfinite(r0.perp_after) and r0.par_after == 0.0
    with pytest.raises(ValueError, match="shapes"):
        perp_refit(W, keep[:, :3], X, X @ W.t())
    with pytest.raises(ValueError, match="lam"):
        perp_refit(W, keep, X, X @ W.t(), lam=-1.0)


# ---------------------------------------------------------------- allocation


def test_allocate_sparsity():
    s = allocate_sparsity([0.1, 0.3, 0.2, 0.3], 0.5, 0.08)
    assert s.mean() == pytest.approx(0.5)
    assert s.max() - s.min() == pytest.approx(0.16)
    assert s[0] > s[2] > s[1] and s[1] == s[3]  # a higher score keeps more weights
    assert np.allclose(allocate_sparsity([2.0, 2.0, 2.0], 0.6), 0.6)
    for bad in ([], [1.0, np.nan]):
        with pytest.raises(ValueError, match="scores"):
            allocate_sparsity(bad, 0.5)
    with pytest.raises(ValueError, match="leaves"):
        allocate_sparsity([1.0, 2.0], 0.95, 0.08)


def test_outlier_ratio_and_sensitivity():
    scores = [torch.ones(10), torch.tensor([100.0, 1.0])]  # mean 109/12 ~ 9.1: one score above 5x it
    assert outlier_ratio(scores, m=5) == pytest.approx(1 / 12)
    assert outlier_ratio(scores, m=20) == 0.0
    rows = [
        {"method": m, "mode": "local", "site": st, "tokens": "all", "layer": l, "e_perp_mean": v}
        for m in ("wanda", "other")
        for st in ("block", "attn")
        for l, v in ((1, 0.3), (0, 0.1), (2, 0.2))
    ]
    df = pd.DataFrame(rows)
    assert perp_sensitivity(df, "wanda").tolist() == [0.1, 0.3, 0.2]
    with pytest.raises(ValueError, match="no local/block/all rows"):
        perp_sensitivity(df, "missing")
    with pytest.raises(ValueError, match="not 0.."):
        perp_sensitivity(df[df["layer"] != 0], "wanda")


# ---------------------------------------------------------------- llmcompressor subclasses on a tiny model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("llmcompressor")
    from transformers import AutoTokenizer

    from tlgeo.compression.llmc import calibration_windows

    d = save_tiny_model(tmp_path_factory.mktemp("tiny") / "base", "llama")
    return d, calibration_windows(AutoTokenizer.from_pretrained(d), n=4, seq_len=32)


def _weights(d):
    from safetensors.torch import load_file

    return load_file(str(d / "model.safetensors"))


def test_perp_awq_loss_prefers_a_parallel_error():
    pytest.importorskip("llmcompressor")
    from tlgeo.compression.perp_awq import PerpAWQModifier

    ref = [torch.tensor([[[1.0, 0.0, 0.0, 0.0]]])]
    parallel = [ref[0] * 1.5]  # error 0.5, all along the update
    perpendicular = [torch.tensor([[[1.0, 0.3, 0.0, 0.0]]])]  # error 0.3, all across it
    perp = PerpAWQModifier(perp_lambda=0.0)
    iso = PerpAWQModifier(perp_lambda=1.0)
    assert perp._compute_loss(ref, parallel) < perp._compute_loss(ref, perpendicular)
    assert iso._compute_loss(ref, parallel) > iso._compute_loss(ref, perpendicular)
    assert iso._compute_loss(ref, perpendicular) == pytest.approx(0.09 / 4)  # AWQ's mean squared error


def test_perp_awq_on_a_tiny_model(tiny, tmp_path):
    from tlgeo.compression.llmc import compress_model

    d, calib = tiny
    a = compress_model(d, "awq", tmp_path / "awq", calib=calib, group_size=16, awq_n_grid=6)
    one = compress_model(d, "awq_perp_l1", tmp_path / "one", calib=calib, group_size=16, awq_n_grid=6)
    zero = compress_model(d, "awq_perp", tmp_path / "zero", calib=calib, group_size=16, awq_n_grid=6)
    assert a["checks"]["grid_ok"] and one["checks"]["grid_ok"] and zero["checks"]["grid_ok"]
    assert one["perp_lambda"] == 1.0 and zero["perp_lambda"] == 0.0
    wa, w1, w0 = (_weights(tmp_path / n) for n in ("awq", "one", "zero"))
    assert all(torch.allclose(wa[k], w1[k], atol=1e-6) for k in wa)  # lambda = 1 is AWQ's own loss
    assert any(not torch.allclose(wa[k], w0[k]) for k in wa)


def _o_proj_io(d, calib):
    """Inputs and dense outputs of block 0's o_proj on the calibration windows (block 0 sees the
    same inputs in the dense and every compressed model)."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    got = {}
    mod = hf.model.layers[0].self_attn.o_proj
    h = mod.register_forward_hook(
        lambda m, a, o: got.update(x=a[0].reshape(-1, a[0].shape[-1]), y=o.reshape(-1, o.shape[-1]))
    )
    with torch.no_grad():
        hf(input_ids=torch.tensor(calib), use_cache=False)
    h.remove()
    return got["x"].double(), got["y"].double(), mod.weight.detach().double()


def test_perp_sparsegpt_refit_on_a_tiny_model(tiny, tmp_path):
    from tlgeo.compression.llmc import compress_model

    d, calib = tiny
    compress_model(d, "sgpt", tmp_path / "sgpt", calib=calib)
    man = compress_model(d, "sgpt_perp", tmp_path / "perp", calib=calib, refit_iters=40)
    ws, wp = _weights(tmp_path / "sgpt"), _weights(tmp_path / "perp")
    k = "model.layers.0.self_attn.o_proj.weight"
    assert torch.equal(ws[k] == 0, wp[k] == 0) and not torch.equal(ws[k], wp[k])  # same mask, other weights
    assert torch.equal(ws["model.layers.0.self_attn.q_proj.weight"], wp["model.layers.0.self_attn.q_proj.weight"])
    # independent check on the captured calibration inputs of block 0's o_proj
    X, Y, W = _o_proj_io(d, calib)
    U = torch.nn.functional.normalize(Y, dim=-1)
    perp_s, par_s = layer_energies(ws[k].double(), W, X, U)
    perp_p, par_p = layer_energies(wp[k].double(), W, X, U)
    iso_mask = sum(layer_energies(W * (ws[k] != 0), W, X, U))
    assert perp_p < 0.7 * perp_s
    assert perp_p + par_p <= iso_mask * (1 + 1e-4)  # never above the unreconstructed mask (max_iso_increase 0)
    log = {r["module"]: r for r in man["refit"]}
    assert set(log) == {f"model.layers.{i}.{m}" for i in range(3) for m in ("self_attn.o_proj", "mlp.down_proj")}
    assert log["model.layers.0.self_attn.o_proj"]["perp_after"] == pytest.approx(perp_p, rel=1e-3)
    assert all(
        r["iso_after"] <= r["iso_bound"] * (1 + 1e-5) and r["perp_after"] <= r["perp_start"] for r in log.values()
    )


def test_allocated_sparsity_on_a_tiny_model(tiny, tmp_path):
    from tlgeo.compression.llmc import compress_model, layer_outlier_ratios

    d, calib = tiny
    man = compress_model(d, "perpalloc", tmp_path / "pa", calib=calib, sensitivity=[0.1, 0.3, 0.2])
    assert np.mean(man["layer_sparsity"]) == pytest.approx(0.5) and man["checks"]["pattern_ok"]
    w = _weights(tmp_path / "pa")
    frac = [float((w[f"model.layers.{i}.mlp.up_proj.weight"] == 0).float().mean()) for i in range(3)]
    assert frac[0] > frac[2] > frac[1]  # the most sensitive layer keeps the most weights
    with pytest.raises(ValueError, match="3 decoder layers"):
        compress_model(d, "perpalloc", tmp_path / "bad", calib=calib, sensitivity=[0.1, 0.2])
    assert not (tmp_path / "bad").exists()

    owl = compress_model(d, "owl", tmp_path / "owl", calib=calib)
    from transformers import AutoModelForCausalLM

    ratios = layer_outlier_ratios(AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32), calib)
    assert owl["allocation_scores"] == pytest.approx(ratios)
    assert np.argsort(owl["layer_sparsity"]).tolist() == np.argsort(-np.asarray(ratios), kind="stable").tolist()
    assert json.loads((tmp_path / "owl" / "tlgeo_compression.json").read_text())["kind"] == "owl"


# ---------------------------------------------------------------- quality table and prediction test


def test_baseline_of():
    from tlgeo.compression.evaluation import baseline_of

    assert baseline_of("awq_perp_l0.5") == "awq" and baseline_of("sgpt_perp_2_4") == "sgpt_2_4"
    assert baseline_of("owl_s70") == "wanda_s70" and baseline_of("perpalloc") == "wanda"
    assert baseline_of("wanda_s70") == "base" and baseline_of("rtn_w3g64") == "base"
    assert baseline_of("perpalloc_s50", {"wanda", "base"}) == "wanda"  # the same model under its short name
    assert baseline_of("sgpt_perp", {"wanda", "base"}) == "base"  # baseline not run


def _items(correct):
    return pd.DataFrame(
        {"task": ["piqa"] * len(correct), "item": range(len(correct)), "correct": correct, "correct_norm": correct}
    )


def test_quality_table_and_prediction_test():
    from tlgeo.compression.evaluation import prediction_test, quality_table

    rng = np.random.default_rng(0)
    n = 200
    truth = rng.random(n) < 0.7
    methods = ["base"] + [f"wanda_s{s}" for s in (30, 40, 50, 60, 70)] + ["rtn_w3g64", "rtn_w4g64"]
    damage = dict(zip(methods, [0, 0.05, 0.1, 0.2, 0.35, 0.5, 0.3, 0.03]))
    items = {m: _items(truth & (rng.random(n) >= d)) for m, d in damage.items()}
    ppl = pd.DataFrame({"method": methods, "ppl": [30 * np.exp(3 * damage[m]) for m in methods]})
    q = quality_table(ppl, items, {"wanda_s50": 12.0}).set_index("method")
    assert q.loc["wanda_s50", "baseline"] == "base" and q.loc["wanda_s50", "seconds"] == 12.0
    assert q.loc["wanda_s70", "delta_acc"] < 0 and q.loc["wanda_s70", "ci_high"] < 0
    assert q.loc["base", "acc"] == pytest.approx(truth.mean())
    # e_perp follows the damage exactly; e adds noise; e_par runs against it
    rows = []
    for m in methods[1:]:
        d = damage[m]
        rows.append(
            {
                "method": m,
                "mode": "local",
                "site": "attn",
                "tokens": "all",
                "ref": "delta",
                "mean_e_perp": d,
                "mean_e": d + rng.normal(0, 0.15),
                "mean_e_par": 1 - d,
            }
        )
    corr, comp = prediction_test(pd.DataFrame(rows), q.reset_index(), n_boot=300)
    c = corr.set_index(["target", "predictor"])
    assert c.loc[("log_ppl", "e_perp"), "rho"] == pytest.approx(1.0)
    assert c.loc[("acc_drop", "e_perp"), "rho"] > 0.7
    vs_par = comp[(comp["target"] == "log_ppl") & (comp["b"] == "e_par")].iloc[0]
    assert vs_par["diff"] > 0 and vs_par["ci_low"] > 0 and vs_par["n_models"] == 7


def test_canonical_names():
    assert parse_method("wanda_s50").canonical == "wanda" and parse_method("awq_w4g64").canonical == "awq"
    assert parse_method("sgpt_perp_l0.5_2_4").canonical == "sgpt_perp_l0.5_2_4"
    assert parse_method("rtn_w3g192").canonical == "rtn_w3g192" and parse_method("owl_s70").canonical == "owl_s70"
