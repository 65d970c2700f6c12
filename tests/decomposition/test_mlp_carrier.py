"""MLP-internal carrier (Table 10): block math, hooks vs brute force, narrow block, errors."""

import pytest
import torch

from tlgeo.data import load_text
from tlgeo.geometry import scale_components
from tlgeo.decomposition.mlp_carrier import (
    CarrierEdit,
    block_outputs,
    block_slices,
    carrier_delta,
    carrier_reconstruction,
    carrier_table_wide,
    mlp_carrier_table,
    mlp_out_weights,
    n_blocks,
    narrow_width,
    output_delta,
    pad_blocks,
    scale_carrier,
    scale_output,
    unpad_blocks,
)

SITES = ["h_vs_x", "y_vs_h"]


def logits(model, toks, hooks=()):
    with torch.no_grad():
        return model.run_with_hooks(toks, fwd_hooks=list(hooks))


def run_recording(model, toks, hooks, names):
    """Run with ``hooks`` and record ``names`` as the later layers see them (after the edit)."""
    store = {}

    def recorder(name):
        def rec(x, hook):  # hook.name may be the aliased hook's name (mlp.hook_post -> mlp.out.hook_in)
            store[name] = x.detach().clone()

        return rec

    with torch.no_grad():
        model.run_with_hooks(toks, fwd_hooks=list(hooks) + [(n, recorder(n)) for n in names])
    return store


def clean(model, toks, names):
    with torch.no_grad():
        _, cache = model.run_with_cache(toks, names_filter=lambda n: n in names)
    return {n: cache[n] for n in names}


def x_hook(model, L):
    return f"blocks.{L}.hook_resid_pre" if model.cfg.parallel_attn_mlp else f"blocks.{L}.hook_resid_mid"


# ---------------------------------------------------------------- pure math


def test_blocks_and_narrow_width():
    assert n_blocks(160, 64) == 3 and narrow_width(160, 64) == 32
    assert [(s.start, s.stop) for s in block_slices(160, 64)] == [(0, 64), (64, 128), (128, 160)]
    assert n_blocks(1536, 576) == 3 and narrow_width(1536, 576) == 384
    assert n_blocks(256, 64) == 4 and narrow_width(256, 64) is None
    assert n_blocks(32, 64) == 1 and narrow_width(32, 64) == 32
    h = torch.randn(2, 5, 160)
    hb = pad_blocks(h, 64)
    assert hb.shape == (2, 5, 3, 64) and (hb[..., 2, 32:] == 0).all()
    assert torch.equal(unpad_blocks(hb, 160), h)
    with pytest.raises(ValueError, match="positive"):
        n_blocks(0, 64)


def brute_carrier(h, x, s_par, s_perp, narrow="include"):
    """Explicit loop over blocks: P(h_g; x[:w_g])."""
    d = x.shape[-1]
    out = []
    for g, sl in enumerate(block_slices(h.shape[-1], d)):
        w = sl.stop - sl.start
        if narrow == "skip" and w < d:
            out.append(h[..., sl])
        else:
            out.append(scale_components(h[..., sl], x[..., :w], s_par, s_perp))
    return torch.cat(out, -1)


def brute_output(h, W, b, s_par, s_perp, narrow="include"):
    """Explicit loop over blocks: sum_g P(y_g; h_g padded) + b."""
    d_mlp, d = W.shape
    total = torch.zeros(*h.shape[:-1], d, dtype=h.dtype) + (0 if b is None else b)
    for sl in block_slices(d_mlp, d):
        y_g = h[..., sl] @ W[sl]
        ref = torch.zeros(*h.shape[:-1], d, dtype=h.dtype)
        ref[..., : sl.stop - sl.start] = h[..., sl]
        w = sl.stop - sl.start
        total = total + (y_g if narrow == "skip" and w < d else scale_components(y_g, ref, s_par, s_perp))
    return total


@pytest.mark.parametrize("d_mlp", [160, 128, 40])
@pytest.mark.parametrize("narrow", ["include", "skip"])
def test_scale_carrier_equals_loop(d_mlp, narrow):
    g = torch.Generator().manual_seed(1)
    h, x = (
        torch.randn(3, 7, d_mlp, generator=g, dtype=torch.float64),
        torch.randn(3, 7, 64, generator=g, dtype=torch.float64),
    )
    for sp, sq in [(0.0, 1.0), (1.0, 0.0), (0.3, -1.2)]:
        torch.testing.assert_close(scale_carrier(h, x, sp, sq, narrow), brute_carrier(h, x, sp, sq, narrow))
    assert scale_carrier(h, x, 1, 1, narrow) is h
    # No-Para leaves each (full) block orthogonal to x
    if d_mlp >= 64:
        out = scale_carrier(h, x, 0.0, 1.0, narrow)
        assert (out[..., :64] * x).sum(-1).abs().max() < 1e-9


def test_narrow_block_is_projected_on_first_coordinates():
    h, x = torch.randn(4, 160, dtype=torch.float64), torch.randn(4, 64, dtype=torch.float64)
    out = scale_carrier(h, x, 0.0, 1.0)
    assert (out[..., 128:] * x[..., :32]).sum(-1).abs().max() < 1e-9
    skip = scale_carrier(h, x, 0.0, 1.0, narrow="skip")
    assert torch.equal(skip[..., 128:], h[..., 128:])
    torch.testing.assert_close(skip[..., :128], out[..., :128])
    assert carrier_delta(h, x, 0.5, 1.0, "include")[..., 128:].abs().max() > 1e-3


@pytest.mark.parametrize("d_mlp", [160, 128])
@pytest.mark.parametrize("narrow", ["include", "skip"])
def test_scale_output_equals_loop(d_mlp, narrow):
    g = torch.Generator().manual_seed(2)
    h = torch.randn(2, 5, d_mlp, generator=g, dtype=torch.float64)
    W, b = torch.randn(d_mlp, 64, generator=g, dtype=torch.float64), torch.randn(64, generator=g, dtype=torch.float64)
    torch.testing.assert_close(block_outputs(h, W).sum(-2), h @ W)
    out = h @ W + b
    for sp, sq in [(0.0, 1.0), (1.0, 0.0), (0.0, 0.0), (2.0, 0.5)]:
        torch.testing.assert_close(scale_output(out, h, W, sp, sq, narrow), brute_output(h, W, b, sp, sq, narrow))
    assert scale_output(out, h, W) is out
    # removing both parts leaves the bias (plus the narrow block's y_g when skipped)
    rest = b + (h[..., 128:] @ W[128:] if narrow == "skip" and d_mlp == 160 else 0)
    torch.testing.assert_close(scale_output(out, h, W, 0.0, 0.0, narrow), rest.expand_as(out))
    assert output_delta(h, W, 0.0, 1.0, narrow).shape == (2, 5, 64)


def test_pure_errors():
    with pytest.raises(ValueError, match="narrow"):
        scale_carrier(torch.randn(2, 160), torch.randn(2, 64), 0.0, narrow="pad")
    with pytest.raises(ValueError, match="W_out"):
        block_outputs(torch.randn(2, 100), torch.randn(160, 64))
    with pytest.raises(ValueError, match="finite"):
        scale_carrier(torch.randn(2, 160), torch.randn(2, 64), float("nan"))


# ---------------------------------------------------------------- model hooks


def test_reconstruction_hook_post_times_w_out(tiny, tokens):
    rec = carrier_reconstruction(tiny, tokens)
    assert len(rec) == tiny.cfg.n_layers and (rec["rel_err"] < 1e-5).all()
    W, _ = mlp_out_weights(tiny, 0)
    assert tuple(W.shape) == (tiny.cfg.d_mlp, tiny.cfg.d_model)


@pytest.mark.parametrize("site", SITES)
def test_noop_edit_leaves_logits_unchanged(tiny, tokens, site):
    base = logits(tiny, tokens)
    for e in [CarrierEdit(site), CarrierEdit(site, 1.0, 1.0, skip_first=1, narrow="skip")]:
        assert torch.equal(logits(tiny, tokens, e.hooks(tiny)), base)
    assert (logits(tiny, tokens, CarrierEdit(site, 0.0).hooks(tiny)) - base).abs().max() > 1e-4


@pytest.mark.parametrize("narrow", ["include", "skip"])
def test_h_vs_x_equals_brute_force(tiny, tokens, narrow):
    L = 1
    h_name, out_name, x_name = f"blocks.{L}.mlp.hook_post", f"blocks.{L}.hook_mlp_out", x_hook(tiny, L)
    c = clean(tiny, tokens, [h_name, x_name])
    W, b = mlp_out_weights(tiny, L)
    W, b = W.detach().double(), None if b is None else b.detach().double()
    sp, sq = 0.25, 0.6
    h_new = brute_carrier(c[h_name].double(), c[x_name].double(), sp, sq, narrow)
    seen = run_recording(
        tiny, tokens, CarrierEdit("h_vs_x", sp, sq, layers=L, narrow=narrow).hooks(tiny), [h_name, out_name]
    )
    torch.testing.assert_close(seen[h_name].double(), h_new, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(seen[out_name].double(), h_new @ W + (0 if b is None else b), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("narrow", ["include", "skip"])
def test_y_vs_h_equals_brute_force(tiny, tokens, narrow):
    L = 2
    h_name, out_name = f"blocks.{L}.mlp.hook_post", f"blocks.{L}.hook_mlp_out"
    c = clean(tiny, tokens, [h_name])
    W, b = mlp_out_weights(tiny, L)
    W, b = W.detach().double(), None if b is None else b.detach().double()
    sp, sq = 0.0, 0.7
    expected = brute_output(c[h_name].double(), W, b, sp, sq, narrow)
    seen = run_recording(tiny, tokens, CarrierEdit("y_vs_h", sp, sq, layers=[L], narrow=narrow).hooks(tiny), [out_name])
    torch.testing.assert_close(seen[out_name].double(), expected, atol=1e-5, rtol=1e-5)


def test_narrow_choice_matters_only_with_a_narrow_block(llama, gpt2, tokens):
    for model, differs in [(llama, True), (gpt2, False)]:
        for site in SITES:
            a = logits(model, tokens, CarrierEdit(site, 0.0, narrow="include").hooks(model))
            b = logits(model, tokens, CarrierEdit(site, 0.0, narrow="skip").hooks(model))
            assert (not torch.equal(a, b)) == differs


def test_full_removal_leaves_bias(gpt2, tokens):
    out = "blocks.1.hook_mlp_out"
    b = mlp_out_weights(gpt2, 1)[1].detach()
    for site in SITES:
        seen = run_recording(gpt2, tokens, CarrierEdit(site, 0.0, 0.0, layers=1).hooks(gpt2), [out])
        torch.testing.assert_close(seen[out], b.expand_as(seen[out]), atol=1e-5, rtol=1e-5)


def test_edit_errors(llama):
    with pytest.raises(IndexError, match="out of range"):
        CarrierEdit("h_vs_x", 0.0, layers=5).hooks(llama)
    with pytest.raises(IndexError, match="out of range"):
        mlp_out_weights(llama, 3)
    for name in ("attn", "y_g_vs_h_g", "mlp_h_vs_x", "h vs x"):  # one name per site: the old aliases are refused
        with pytest.raises(KeyError, match=f"unknown MLP-carrier site '{name}'; known: \\['h_vs_x', 'y_vs_h'\\]"):
            CarrierEdit(name)
    with pytest.raises(ValueError, match="narrow"):
        CarrierEdit("y_vs_h", narrow="pad")
    with pytest.raises(ValueError, match="no layers left"):
        CarrierEdit("y_vs_h", 0.0, skip_first=3).hooks(llama)
    d = CarrierEdit("y_vs_h", 0.0, layers=[1, 2]).describe()
    assert d["site"] == "y_vs_h" and d["layers"] == (1, 2) and d["narrow"] == "include"


# ---------------------------------------------------------------- experiment


def test_carrier_table(llama, tmp_path):
    text = load_text("wikitext2")[:4000]
    log = tmp_path / "t10.jsonl"
    df = mlp_carrier_table(llama, text, max_tokens=30, context=32, skip_first=1, log_path=log)
    assert df["site"].tolist()[0] == "none" and df["delta_loss"].iloc[0] == 0
    # 1 baseline + 2 removals x (mlp + 2 carrier sites x 2 narrow choices)
    assert len(df) == 11 and (df["n_tokens"] == 30).all() and (df["layers"].iloc[1:] == "1-2").all()
    assert set(df["narrow_width"]) == {32}
    wide = carrier_table_wide(df)
    assert wide.shape == (5, 2) and wide.notna().all().all()
    # the removals change the loss, and the rows are resumed from the log
    assert (df["delta_loss"].iloc[1:].abs() > 0).all()
    again = mlp_carrier_table(llama, text, max_tokens=30, context=32, skip_first=1, log_path=log)
    assert again["seconds"].tolist() == df["seconds"].tolist()


def test_carrier_table_errors(llama, gpt2):
    with pytest.raises(ValueError, match="empty corpus"):
        mlp_carrier_table(llama, "   ", max_tokens=10, context=16)
    with pytest.raises(ValueError, match="n_ctx"):
        mlp_carrier_table(llama, "some text", max_tokens=10, context=10_000)
    with pytest.raises(ValueError, match="narrow"):
        mlp_carrier_table(llama, "some text", narrow=())
    with pytest.raises(IndexError, match="out of range"):
        mlp_carrier_table(llama, "some text", context=32, layers=[7])
    df = mlp_carrier_table(gpt2, "some text " * 20, max_tokens=20, context=32, layers=[2])
    assert len(df) == 7 and df["narrow_width"].isna().all()  # no narrow block: include only


@pytest.mark.real
def test_smollm2_carrier(smollm2):
    """d_mlp 1536 = 2 x 576 + 384: hook_post @ W_out is the MLP output, no-ops are exact,
    and h vs x (narrow block included) matches the explicit block loop."""
    toks = smollm2.to_tokens("The capital of France is Paris.")
    rec = carrier_reconstruction(smollm2, toks, layers=[0, 15, 29])
    assert (rec["rel_err"] < 1e-5).all() and (rec["G"] == 3).all() and (rec["narrow_width"] == 384).all()
    names = ["blocks.3.mlp.hook_post", "blocks.3.hook_resid_mid"]
    with torch.no_grad():
        base, cache = smollm2.run_with_cache(toks, names_filter=lambda n: n in names)
    for site in SITES:
        assert torch.equal(logits(smollm2, toks, CarrierEdit(site, layers=[3]).hooks(smollm2)), base)
    h_new = brute_carrier(cache[names[0]].double(), cache[names[1]].double(), 0.0, 1.0)
    seen = run_recording(smollm2, toks, CarrierEdit("h_vs_x", 0.0, layers=3).hooks(smollm2), names[:1])
    torch.testing.assert_close(seen[names[0]].double(), h_new, atol=1e-4, rtol=1e-4)
