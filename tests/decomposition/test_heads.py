import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from tlgeo import Edit, perplexity
from tlgeo.decomposition.heads import (
    ALL,
    head_alpha_map,
    head_edits,
    head_patch_hook,
    head_sensitivity,
    patched_hooks,
    per_text_loss,
    select_heads,
    selective_removal,
    text_batches,
)
from tlgeo.geometry.value_space import kv_head_index

FAST = dict(n_perm=200)


@pytest.fixture(scope="module")
def texts():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (6, 16), generator=g)


def _z_at(model, tokens, layer, hooks=()):
    rec = {}

    def grab(z, hook):
        rec["z"] = z.clone()

    with torch.inference_mode():
        model.run_with_hooks(tokens, fwd_hooks=[*hooks, (f"blocks.{layer}.attn.hook_z", grab)])
    return rec["z"]


def _direct_losses(model, tokens, hooks=()):
    with torch.inference_mode():
        return per_text_loss(model.run_with_hooks(tokens, fwd_hooks=list(hooks)), tokens)


# --- alpha map -------------------------------------------------------------------


def test_alpha_map_matches_hand_computation(llama, tokens):
    df = head_alpha_map(llama, tokens, site="value_full")
    cfg = llama.cfg
    assert len(df) == cfg.n_layers * cfg.n_heads
    assert (df["abs_alpha_mean"] >= df["alpha_mean"].abs() - 1e-6).all()
    assert df["share_positive"].between(0, 1).all()
    L = 1
    names = {f"blocks.{L}.attn.hook_z", f"blocks.{L}.attn.hook_v"}
    with torch.inference_mode():
        _, cache = llama.run_with_cache(tokens, names_filter=lambda n: n in names)
    z, v = cache[f"blocks.{L}.attn.hook_z"].float(), cache[f"blocks.{L}.attn.hook_v"].float()
    kv = kv_head_index(cfg.n_heads, v.shape[-2])
    for h in range(cfg.n_heads):
        o, r = z[:, 1:, h], v[:, 1:, kv[h]]  # position 0 left out
        alpha = (o * r).sum(-1) / (r * r).sum(-1).clamp_min(1e-6)
        row = df[(df.layer == L) & (df["head"] == h)].iloc[0]
        assert row.alpha_mean == pytest.approx(alpha.mean().item(), rel=1e-4, abs=1e-6)
        assert row.share_positive == pytest.approx((alpha > 0).float().mean().item())
        assert row.n == alpha.numel()


def test_alpha_map_rejects_residual_site(llama, tokens):
    with pytest.raises(ValueError, match="per-head decomposition"):
        head_alpha_map(llama, tokens, site="attn")


# --- single-head edits and the sensitivity table -----------------------------------


def test_single_head_edit_changes_only_that_head(llama, tokens):
    L, h = 1, 2
    clean = _z_at(llama, tokens, L)
    edited = _z_at(llama, tokens, L, Edit("value_excl_self", 0.0, layers=L, heads=[h]).hooks(llama))
    changed = (edited - clean).abs().amax(dim=(0, 1, 3))  # per head
    assert changed[h] > 1e-4
    assert torch.all(changed[[i for i in range(llama.cfg.n_heads) if i != h]] == 0)


def test_edited_forwards_start_at_the_layer(llama, texts):
    """Only the unedited forward per batch (and the one check against a full forward)
    runs block 0; every edited forward of a layer-2 map starts at block 2."""
    from tlgeo.hooks.resume import readout_ok

    assert readout_ok(llama, torch.tensor([[1, 2, 3]]))  # checked once per model (a forward), before the count
    runs = []
    handle = llama.blocks[0].original_component.register_forward_hook(lambda *a: runs.append(1))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the start check must pass silently
            df = head_sensitivity(llama, texts, layers=[2], batch_size=3, **FAST)
        n_start = len(runs)
        full = head_sensitivity(llama, texts, layers=[2], batch_size=3, start_at_layer=False, **FAST)
    finally:
        handle.remove()
    n_batches, n_cond = 2, llama.cfg.n_heads + 1  # 6 texts, 3 per batch; each head and "all"
    assert n_start == n_batches + 1
    assert len(runs) - n_start == n_batches * (1 + n_cond)
    np.testing.assert_allclose(df["delta_loss"], full["delta_loss"], rtol=0, atol=1e-5)


def test_sensitivity_rows_match_direct_forwards(llama, texts):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the start_at_layer check must pass silently
        df = head_sensitivity(llama, texts, layers=[1, 2], batch_size=4, **FAST)
    n_heads = llama.cfg.n_heads
    assert len(df) == 2 * (n_heads + 1)
    assert list(df.columns[:10]) == [
        "site",
        "layer",
        "head",
        "delta_loss",
        "ci_low",
        "ci_high",
        "p",
        "q",
        "n_texts",
        "n_tokens",
    ]
    base = _direct_losses(llama, texts).double()
    for L in (1, 2):
        for head, heads in [(ALL, None), (0, [0]), (3, [3])]:
            e = _direct_losses(llama, texts, Edit("value_excl_self", 0.0, layers=L, heads=heads).hooks(llama))
            row = df[(df.layer == L) & (df["head"] == head)].iloc[0]
            assert row.delta_loss == pytest.approx((e.double() - base).mean().item(), abs=1e-6)
    # the "all" row is the edit with heads=None, which equals listing every head
    every = _direct_losses(llama, texts, Edit("value_excl_self", 0.0, layers=2, heads=range(n_heads)).hooks(llama))
    row = df[(df.layer == 2) & (df["head"] == ALL)].iloc[0]
    assert row.delta_loss == pytest.approx((every.double() - base).mean().item(), abs=1e-6)
    assert (df.ci_low <= df.delta_loss + 1e-12).all() and (df.delta_loss <= df.ci_high + 1e-12).all()
    assert (df.q >= df.p - 1e-12).all() and df.q.le(1).all()
    assert (df.n_texts == 6).all() and (df.n_tokens == 6 * 15).all()


def test_edited_forwards_read_each_text_out_alone(llama, texts, monkeypatch):
    """Resumed edited forwards stop at the last block and each text goes through the unembedding alone (one text's
    [pos, vocab] logits at a time, not the batch's); the rows equal those of full logits."""
    from tlgeo.hooks import resume

    assert resume.readout_ok(llama, torch.tensor([[1, 2, 3]]))
    shapes = []
    handle = llama.unembed.register_forward_hook(lambda m, args, out: shapes.append(tuple(out.shape[:-1])))
    try:
        fast = head_sensitivity(llama, texts, layers=[2], batch_size=3, **FAST)
        n_edited = 2 * (llama.cfg.n_heads + 1) * 3  # 2 batches x conditions x texts, each alone
        assert sum(1 for s in shapes if s[0] == 1) >= n_edited and max(s[0] for s in shapes) == 3  # 3: the base
        monkeypatch.setitem(resume._READOUT_OK, llama, False)
        full = head_sensitivity(llama, texts, layers=[2], batch_size=3, **FAST)
    finally:
        handle.remove()
    np.testing.assert_allclose(fast["delta_loss"], full["delta_loss"], rtol=0, atol=1e-6)


def test_sensitivity_token_weighting_and_batches(llama):
    # texts of different lengths: batched by length, weighted by scored tokens
    g = torch.Generator().manual_seed(2)
    texts = [torch.randint(0, 256, (n,), generator=g) for n in (8, 12, 8, 20)]
    batches = text_batches(llama, texts, batch_size=8)
    assert [tuple(b.shape) for b in batches] == [(2, 8), (1, 12), (1, 20)]
    df = head_sensitivity(llama, texts, layers=2, **FAST)
    row = df[df["head"] == ALL].iloc[0]
    d, w = [], []
    for b in batches:
        base = _direct_losses(llama, b)
        e = _direct_losses(llama, b, Edit("value_excl_self", 0.0, layers=2).hooks(llama))
        d += (e - base).tolist()
        w += [b.shape[1] - 1] * b.shape[0]
    assert row.delta_loss == pytest.approx(np.average(d, weights=w), abs=1e-6)
    assert row.n_tokens == sum(w)


def test_sensitivity_reproducible_and_resumable(llama, texts, tmp_path):
    log = tmp_path / "sens.jsonl"
    a = head_sensitivity(llama, texts, layers=[2], batch_size=3, seed=3, log_path=log, **FAST)
    b = head_sensitivity(llama, texts, layers=[2], batch_size=3, seed=3, **FAST)
    pd.testing.assert_frame_equal(a, b)
    full = head_sensitivity(llama, texts, layers=[2], batch_size=3, seed=3, start_at_layer=False, **FAST)
    np.testing.assert_allclose(full.delta_loss, a.delta_loss, atol=1e-6)
    n_lines = len(log.read_text().splitlines())
    assert n_lines == 2 * 2  # per batch: the unedited losses and layer 2

    calls = []
    orig = type(llama).run_with_hooks

    def counting(self, *args, **kwargs):
        calls.append(1)
        return orig(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(llama), "run_with_hooks", counting)
        c = head_sensitivity(llama, texts, layers=[2], batch_size=3, seed=3, log_path=log, **FAST)
    assert calls == []  # nothing recomputed
    pd.testing.assert_frame_equal(a, c)
    assert len(log.read_text().splitlines()) == n_lines


def test_sensitivity_bad_input(llama, texts):
    with pytest.raises(ValueError, match="per-head site"):
        head_sensitivity(llama, texts, site="attn", **FAST)
    with pytest.raises(ValueError, match="no texts"):
        head_sensitivity(llama, [], **FAST)
    with pytest.raises(ValueError, match="n_ctx"):
        head_sensitivity(llama, torch.zeros(1, llama.cfg.n_ctx + 1, dtype=torch.long), **FAST)
    with pytest.raises(IndexError, match="out of range"):
        head_sensitivity(llama, texts, layers=[7], **FAST)
    with pytest.raises(ValueError, match="at least 2"):
        head_sensitivity(llama, [torch.tensor([1])], **FAST)


# --- activation patching composed with edits --------------------------------------


def test_patching_composes_with_edit(llama, tokens):
    L, patched, n = 1, 1, llama.cfg.n_heads
    corrupt = tokens.flip(-1)
    clean_z = _z_at(llama, tokens, L)
    others = Edit("value_excl_self", 0.0, layers=L, heads=[h for h in range(n) if h != patched])
    edit_only = _z_at(llama, corrupt, L, others.hooks(llama))
    patch = head_patch_hook(L, patched, clean_z)
    both = _z_at(llama, corrupt, L, patched_hooks(llama, others, [patch]))
    torch.testing.assert_close(both[:, :, patched], clean_z[:, :, patched], rtol=0, atol=0)
    rest = [h for h in range(n) if h != patched]
    torch.testing.assert_close(both[:, :, rest], edit_only[:, :, rest], rtol=0, atol=0)
    # disjoint heads: the order does not matter
    reverse = _z_at(llama, corrupt, L, [patch, *others.hooks(llama)])
    torch.testing.assert_close(reverse, both, rtol=0, atol=0)
    # the edit covers the patched head too: edit-then-patch keeps the clean z exactly,
    # patch-then-edit re-decomposes it against the corrupt run's v and pattern
    every = Edit("value_excl_self", 0.0, layers=L)
    first_edit = _z_at(llama, corrupt, L, patched_hooks(llama, every, [patch]))
    first_patch = _z_at(llama, corrupt, L, [patch, *every.hooks(llama)])
    torch.testing.assert_close(first_edit[:, :, patched], clean_z[:, :, patched], rtol=0, atol=0)
    assert (first_patch[:, :, patched] - clean_z[:, :, patched]).abs().max() > 1e-4
    # and the whole forward runs in one call with the patch and the edit
    with torch.inference_mode():
        logits = llama.run_with_hooks(corrupt, fwd_hooks=patched_hooks(llama, others, [patch]))
    assert torch.isfinite(logits).all()


def test_patch_hook_shape_error(llama, tokens):
    bad = torch.zeros(1, 3, llama.cfg.n_heads, llama.cfg.d_head)
    with pytest.raises(ValueError, match="does not match"):
        llama.run_with_hooks(tokens, fwd_hooks=[head_patch_hook(0, 0, bad)])


# --- selective removal -------------------------------------------------------------


def _fake_map():
    rows = []
    for L in (1, 2):
        for h in [*range(4), ALL]:
            d = 0.5 if h == ALL else 0.01 * (L * 4 + h) * (-1) ** h
            rows.append(
                {
                    "site": "value_excl_self",
                    "layer": L,
                    "head": h,
                    "delta_loss": d,
                    "ci_low": d - 0.02,
                    "ci_high": d + 0.02,
                    "p": 0.5,
                    "q": 0.5,
                }
            )
    return pd.DataFrame(rows)


def test_select_heads():
    m = _fake_map()
    # delta = +-0.01 (4L + h): L1 -> 0.04,-0.05,0.06,-0.07 ; L2 -> 0.08,-0.09,0.10,-0.11
    assert select_heads(m, k=3) == {1: [3], 2: [1, 3]}
    assert select_heads(m, threshold=0.0) == {1: [1, 3], 2: [1, 3]}  # ci_high = d + 0.02 < 0
    assert select_heads(m, threshold=-1) == {}
    with pytest.raises(ValueError, match="exactly one"):
        select_heads(m)
    with pytest.raises(ValueError, match="exactly one"):
        select_heads(m, k=1, threshold=0.1)
    edits = head_edits("value_excl_self", {1: [3], 2: [1, 3], 0: []})
    assert [(e.layers, e.heads) for e in edits] == [(1, (3,)), (2, (1, 3))]


def test_selective_removal(llama, texts):
    stream = texts.reshape(-1)
    df = selective_removal(llama, stream, _fake_map(), k=3, context=64, n_random=2, seed=0)
    assert list(df.condition) == ["unedited", "selective", "random0", "random1", "all heads"]
    assert list(df.n_heads) == [0, 3, 3, 3, 8]
    ppl = dict(zip(df.condition, df.ppl))
    assert ppl["unedited"] == pytest.approx(perplexity(llama, stream, context=64).ppl)
    every = [Edit("value_excl_self", 0.0, layers=[1, 2])]
    assert ppl["all heads"] == pytest.approx(perplexity(llama, stream, context=64, fwd_hooks=every[0].hooks(llama)).ppl)
    sel = [h for e in head_edits("value_excl_self", {1: [3], 2: [1, 3]}) for h in e.hooks(llama)]
    assert ppl["selective"] == pytest.approx(perplexity(llama, stream, context=64, fwd_hooks=sel).ppl)
    rec = df.set_index("condition").recovered
    assert rec["selective"] == pytest.approx(
        1 - (ppl["selective"] - ppl["unedited"]) / (ppl["all heads"] - ppl["unedited"])
    )
    again = selective_removal(llama, stream, _fake_map(), k=3, context=64, n_random=2, seed=0)
    pd.testing.assert_frame_equal(df, again)


# --- real model --------------------------------------------------------------------


@pytest.mark.real
def test_smollm2_sensitivity_one_layer(smollm2):
    from tlgeo.data import load_text
    from tlgeo.decomposition.observe import corpus_batches

    toks = corpus_batches(smollm2, load_text("wikitext2", max_chars=4000), seq_len=24, max_tokens=60)[:2]
    L = 24
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # start_at_layer must match a full forward on the real model
        df = head_sensitivity(smollm2, toks, layers=[L], n_perm=200)
    assert len(df) == smollm2.cfg.n_heads + 1
    base = _direct_losses(smollm2, toks).double()
    e = _direct_losses(smollm2, toks, Edit("value_excl_self", 0.0, layers=L).hooks(smollm2)).double()
    row = df[df["head"] == ALL].iloc[0]
    assert row.delta_loss == pytest.approx((e - base).mean().item(), abs=1e-4)
    assert 1 < row.base_loss < 8
