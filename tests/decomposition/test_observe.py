"""Parallel-ratio profile: shape of the table and agreement with a direct computation."""

import pytest
import torch

from tlgeo.decomposition.observe import corpus_batches, parallel_profile, summarize_profile
from tlgeo.hooks.sites import DECOMPOSITION_SITES


def test_profile_rows_and_columns(llama, tokens):
    df = parallel_profile(llama, tokens, batch_size=1)
    cfg = llama.cfg
    n_tok = tokens.numel()
    per_site = df.groupby("site").size().to_dict()
    for s in ("attn", "mlp", "block"):
        assert per_site[s] == n_tok * cfg.n_layers
    for s in ("value_full", "value_excl_self"):
        assert per_site[s] == n_tok * cfg.n_layers * cfg.n_heads
    assert set(df.columns) >= {"site", "layer", "head", "seq", "pos", "alpha", "parallel_ratio", "norm_ratio", "cosine"}
    assert df[["alpha", "parallel_ratio", "norm_ratio", "cosine"]].notna().all().all()
    assert sorted(df["seq"].unique()) == [0, 1]


def test_profile_matches_direct_computation(llama, tokens):
    L = 1
    names = [
        f"blocks.{L}.hook_resid_pre",
        f"blocks.{L}.hook_attn_out",
        f"blocks.{L}.attn.hook_v",
        f"blocks.{L}.attn.hook_z",
    ]
    with torch.no_grad():
        _, cache = llama.run_with_cache(tokens, names_filter=lambda n: n in names)
    r, y = cache[names[0]].double(), cache[names[1]].double()
    alpha = (y * r).sum(-1) / (r * r).sum(-1)
    perp = y - alpha[..., None] * r
    expected = (alpha.abs() * r.norm(dim=-1) / perp.norm(dim=-1)).flatten()
    df = parallel_profile(llama, tokens, sites=["attn", "value_full"], layers=[L])
    got = df[df.site == "attn"].sort_values(["seq", "pos"])["parallel_ratio"].to_numpy()
    torch.testing.assert_close(torch.tensor(got, dtype=torch.float64), expected, rtol=1e-4, atol=1e-6)
    # value_full, head 3 reads KV head 1
    v, z = cache[names[2]].double()[:, :, 1], cache[names[3]].double()[:, :, 3]
    a = (z * v).sum(-1) / (v * v).sum(-1)
    got_a = df[(df.site == "value_full") & (df["head"] == 3)].sort_values(["seq", "pos"])["alpha"].to_numpy()
    torch.testing.assert_close(torch.tensor(got_a, dtype=torch.float64), a.flatten(), rtol=1e-4, atol=1e-6)


def test_profile_with_edit_active(llama, tokens):
    """Under s_par = 0 at the attention site the observed attention update has no parallel part."""
    from tlgeo.hooks.edits import edit_hooks

    df = parallel_profile(llama, tokens, sites=["attn"], fwd_hooks=edit_hooks(llama, "attn", 0.0, skip_first=0))
    assert df["parallel_ratio"].abs().max() < 1e-3


def test_summary(llama, tokens):
    s = summarize_profile(parallel_profile(llama, tokens))
    assert len(s) == len(DECOMPOSITION_SITES) * llama.cfg.n_layers
    assert ((s.parallel_dominant >= 0) & (s.parallel_dominant <= 1)).all()
    assert (s["n"] > 0).all()


def test_profile_from_text(llama):
    text = "The quick brown fox jumps over the lazy dog. " * 20
    toks = corpus_batches(llama, text, seq_len=64)
    assert toks.shape[1] == 64 and toks[0, 0].item() == llama.tokenizer.bos_token_id
    df = parallel_profile(llama, text, seq_len=64, sites=["attn"])
    assert df["seq"].nunique() == toks.shape[0]


def test_profile_errors(llama, tokens):
    with pytest.raises(ValueError, match="empty corpus"):
        parallel_profile(llama, "   ")
    with pytest.raises(ValueError, match="exceeds"):
        corpus_batches(llama, "hello " * 500, seq_len=10_000)
    with pytest.raises(ValueError, match="corpus too short"):
        corpus_batches(llama, "hi", seq_len=64)
    with pytest.raises(ValueError, match="no decomposition"):
        parallel_profile(llama, tokens, sites=["diag"])
    with pytest.raises(IndexError, match="out of range"):
        parallel_profile(llama, tokens, layers=[7])
    with pytest.raises(ValueError, match="exceeds the model.s n_ctx"):
        parallel_profile(llama, torch.zeros(1, 300, dtype=torch.long))
