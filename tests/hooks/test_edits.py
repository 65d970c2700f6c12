"""Edits through hooks: no-ops, brute-force agreement, GQA, once-per-forward, cleanup, errors."""

import math

import pytest
import torch

from tlgeo.hooks.edits import Edit, edit, edit_hooks
from tlgeo.hooks.sites import SITES, UnknownSiteError
from tlgeo.geometry.value_space import kv_head_index


def logits(model, toks, hooks=()):
    with torch.no_grad():
        return model.run_with_hooks(toks, fwd_hooks=list(hooks))


def recorder(store, key):
    """A hook that records the tensor it sees (after any earlier hook on the same point)."""

    def fn(x, hook):
        store[key] = x.detach().clone()

    return fn


def clean_cache(model, toks, names):
    with torch.no_grad():
        _, cache = model.run_with_cache(toks, names_filter=lambda n: n in names)
    return {n: cache[n] for n in names}


@pytest.mark.parametrize("site", list(SITES))
def test_noop_edit_leaves_logits_unchanged(tiny, tokens, site):
    base = logits(tiny, tokens)
    for e in [Edit(site), Edit(site, 1.0, 1.0, skip_first=1)]:
        assert torch.equal(logits(tiny, tokens, e.hooks(tiny)), base)


@pytest.mark.parametrize("site", list(SITES))
def test_removal_changes_logits(tiny, tokens, site):
    base = logits(tiny, tokens)
    out = logits(tiny, tokens, Edit(site, s_par=0.0).hooks(tiny))
    assert torch.isfinite(out).all()
    assert (out - base).abs().max() > 1e-4


def test_exclude_self_equals_brute_force(llama, tokens):
    L = 1
    names = [f"blocks.{L}.attn.hook_pattern", f"blocks.{L}.attn.hook_v", f"blocks.{L}.attn.hook_z"]
    c = clean_cache(llama, tokens, names)
    A, v, z = (c[n].double() for n in names)
    s_par, s_perp = 0.3, 0.8
    kv = kv_head_index(llama.cfg.n_heads, llama.cfg.n_key_value_heads)
    expected = torch.empty_like(z)
    B, P, H, _ = z.shape
    for b in range(B):
        for t in range(P):
            for h in range(H):
                vt = v[b, t, kv[h]]
                d = A[b, h, t, t] * vt
                cvec = z[b, t, h] - d
                alpha = cvec @ vt / max(vt @ vt, 1e-6)
                par = alpha * vt
                expected[b, t, h] = d + s_par * par + s_perp * (cvec - par)
    seen = {}
    hooks = edit_hooks(llama, "value_excl_self", s_par, s_perp, layers=L)
    logits(llama, tokens, hooks + [(names[2], recorder(seen, "z"))])
    torch.testing.assert_close(seen["z"].double(), expected, atol=1e-5, rtol=1e-5)


def test_value_full_equals_brute_force_gqa_and_head_selection(llama, tokens):
    """Head h reads KV head h // 2 (4 query heads, 2 KV heads); unselected heads untouched."""
    assert llama.cfg.n_key_value_heads < llama.cfg.n_heads
    L, heads = 2, [1, 2]
    names = [f"blocks.{L}.attn.hook_v", f"blocks.{L}.attn.hook_z"]
    c = clean_cache(llama, tokens, names)
    v, z = c[names[0]].double(), c[names[1]].double()
    expected = z.clone()
    for h in heads:
        vt = v[:, :, h // 2]
        alpha = (z[:, :, h] * vt).sum(-1, keepdim=True) / (vt * vt).sum(-1, keepdim=True)
        expected[:, :, h] = z[:, :, h] - alpha * vt  # s_par = 0
    seen = {}
    hooks = edit_hooks(llama, "value_full", 0.0, layers=L, heads=heads)
    logits(llama, tokens, hooks + [(names[1], recorder(seen, "z"))])
    torch.testing.assert_close(seen["z"].double(), expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(seen["z"][:, :, [0, 3]], c[names[1]][:, :, [0, 3]])


def test_value_perp_scaling_same_for_full_and_exclude_self(llama, tokens):
    """The self message A_tt v_t is parallel to v_t, so s_perp edits agree exactly."""
    a = logits(llama, tokens, edit_hooks(llama, "value_full", 1.0, 0.3))
    b = logits(llama, tokens, edit_hooks(llama, "value_excl_self", 1.0, 0.3))
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    c = logits(llama, tokens, edit_hooks(llama, "value_full", 0.3, 1.0))
    d = logits(llama, tokens, edit_hooks(llama, "value_excl_self", 0.3, 1.0))
    assert (c - d).abs().max() > 1e-4


@pytest.mark.parametrize("site,ref_hook", [("attn", "hook_resid_pre"), ("mlp", "hook_resid_mid")])
def test_residual_parallel_removal_is_perpendicular(gpt2, tokens, site, ref_hook):
    L = 1
    target = f"blocks.{L}.{SITES[site].target}"
    seen = {}
    hooks = [(f"blocks.{L}.{ref_hook}", recorder(seen, "ref"))]
    hooks += edit_hooks(gpt2, site, 0.0, layers=L) + [(target, recorder(seen, "y"))]
    logits(gpt2, tokens, hooks)
    cos = torch.nn.functional.cosine_similarity(seen["y"], seen["ref"], dim=-1)
    assert cos.abs().max() < 1e-4


def test_parallel_block_mlp_reads_resid_pre(gpt_neox, tokens):
    assert gpt_neox.cfg.parallel_attn_mlp
    seen = {}
    hooks = [("blocks.0.hook_resid_pre", recorder(seen, "pre"))]
    hooks += edit_hooks(gpt_neox, "mlp", 0.0, layers=0, skip_first=0) + [("blocks.0.hook_mlp_out", recorder(seen, "y"))]
    logits(gpt_neox, tokens, hooks)
    cos = torch.nn.functional.cosine_similarity(seen["y"], seen["pre"], dim=-1)
    assert cos.abs().max() < 1e-4


def test_block_removal_keeps_resid_pre_and_perp(llama, tokens):
    L = 1
    seen = {}
    hooks = [(f"blocks.{L}.hook_resid_pre", recorder(seen, "pre"))]
    hooks += edit_hooks(llama, "block", 0.0, 2.0, layers=L)
    hooks += [(f"blocks.{L}.hook_resid_post", recorder(seen, "post"))]
    logits(llama, tokens, hooks)
    c = clean_cache(llama, tokens, [f"blocks.{L}.hook_resid_post"])
    y = c[f"blocks.{L}.hook_resid_post"] - seen["pre"]
    y_par = (y * seen["pre"]).sum(-1, keepdim=True) / (seen["pre"] ** 2).sum(-1, keepdim=True) * seen["pre"]
    torch.testing.assert_close(seen["post"], seen["pre"] + 2.0 * (y - y_par), atol=1e-4, rtol=1e-4)


def test_diag_removal_pattern(tiny, tokens):
    L = 1
    name = f"blocks.{L}.attn.hook_pattern"
    seen = {}
    logits(tiny, tokens, edit_hooks(tiny, "diag", 0.0, layers=L) + [(name, recorder(seen, "A"))])
    A = seen["A"]
    torch.testing.assert_close(A.sum(-1), torch.ones_like(A.sum(-1)), atol=1e-5, rtol=0)
    diag = torch.diagonal(A, dim1=-2, dim2=-1)
    assert torch.all(diag[..., 1:] == 0)
    assert torch.allclose(diag[..., 0], torch.ones_like(diag[..., 0]))  # row 0 kept
    assert torch.all(A.triu(1) == 0)  # still causal


def test_diag_head_selection(llama, tokens):
    name = "blocks.0.attn.hook_pattern"
    clean = clean_cache(llama, tokens, [name])[name]
    seen = {}
    logits(
        llama, tokens, edit_hooks(llama, "diag", 0.0, layers=0, skip_first=0, heads=[3]) + [(name, recorder(seen, "A"))]
    )
    assert torch.equal(seen["A"][:, :3], clean[:, :3])
    assert torch.all(torch.diagonal(seen["A"][:, 3], dim1=-2, dim2=-1)[..., 1:] == 0)


def _counting(hooks, counts):
    out = []
    for name, fn in hooks:

        def wrapped(x, hook, _fn=fn, _name=name):
            counts[_name] = counts.get(_name, 0) + 1
            return _fn(x, hook)

        out.append((name, wrapped))
    return out


@pytest.mark.parametrize("site", list(SITES))
def test_each_hook_runs_exactly_once_per_forward(llama, tokens, site):
    counts = {}
    hooks = _counting(Edit(site, s_par=0.5).hooks(llama), counts)
    with torch.no_grad():
        llama.run_with_hooks(tokens, fwd_hooks=hooks)
        assert counts and set(counts.values()) == {1}, counts
        with edit(llama, Edit(site, s_par=0.5)):
            out1 = llama(tokens)
        # the bridge's alias names (hook_resid_pre == hook_in, hook_z == attn.o.hook_in)
        # resolve to one hook point: the edit fires once, not once per name
        counts.clear()
        with llama.hooks(fwd_hooks=hooks):
            out2 = llama(tokens)
    assert set(counts.values()) == {1}
    assert torch.equal(out1, out2)


def _n_hooks(model):
    return sum(len(hp._forward_hooks) for hp in set(model.hook_dict.values()))


def test_hooks_removed_after_exception(llama, tokens):
    base = logits(llama, tokens)
    before = _n_hooks(llama)

    def boom(x, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        with edit(llama, "value_excl_self", s_par=0.0):
            assert _n_hooks(llama) > before
            llama.run_with_hooks(tokens, fwd_hooks=[("blocks.1.hook_mlp_out", boom)])
    assert _n_hooks(llama) == before
    with pytest.raises(RuntimeError, match="boom"):
        llama.run_with_hooks(tokens, fwd_hooks=edit_hooks(llama, "attn", 0.0) + [("blocks.2.hook_attn_out", boom)])
    assert _n_hooks(llama) == before
    assert torch.equal(logits(llama, tokens), base)


def test_gradients_flow_through_edit(llama, tokens):
    params = [p for p in llama.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    with edit(llama, "value_full", s_par=0.0):
        loss = llama(tokens, return_type="loss")
    loss.backward()
    grads = [p.grad for p in params if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)
    for p in params:
        p.grad = None


def test_tensor_scale_per_token(llama, tokens):
    """A per-token tensor s_par (e.g. a learned gate) equals the float edit where it is constant."""
    s = torch.zeros(tokens.shape[0], tokens.shape[1])
    a = logits(llama, tokens, edit_hooks(llama, "attn", s))
    b = logits(llama, tokens, edit_hooks(llama, "attn", 0.0))
    torch.testing.assert_close(a, b)


def test_bfloat16_model_edits():
    from tlgeo.models import tiny_model

    m = tiny_model("llama", dtype=torch.bfloat16)
    toks = torch.randint(0, 256, (1, 16))
    base = logits(m, toks)
    assert torch.equal(logits(m, toks, edit_hooks(m, "value_excl_self")), base)
    out = logits(m, toks, edit_hooks(m, "value_excl_self", 0.0))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(site="nope"), UnknownSiteError, "unknown site 'nope'"),
        (dict(site="attn", layers=[3]), IndexError, r"layer\(s\) 3 out of range: the model has 3 layers"),
        (dict(site="attn", layers=[-1]), IndexError, "out of range"),
        (dict(site="value_full", heads=[4]), IndexError, r"head\(s\) 4 out of range: the model has 4 heads"),
        (dict(site="attn", heads=[0]), ValueError, "heads apply only to per-head sites"),
        (dict(site="attn", s_par=math.nan), ValueError, "s_par must be finite"),
        (dict(site="attn", s_perp=math.inf), ValueError, "s_perp must be finite"),
        (dict(site="attn", s_par="x"), ValueError, "s_par must be a number"),
        (dict(site="diag", s_perp=0.5), ValueError, "s_perp must be 1"),
        (dict(site="attn", skip_first=3), ValueError, "no layers left"),
    ],
)
def test_bad_edits_raise_clear_errors(llama, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Edit(**kwargs).hooks(llama)


def test_bad_edit_leaves_no_hooks(llama, tokens):
    before = _n_hooks(llama)
    with pytest.raises(IndexError):
        with edit(llama, "attn", layers=[0, 99]):
            pass
    assert _n_hooks(llama) == before


def test_tensor_scale_per_head_site(llama, tokens):
    """Per-token ([b, p, 1]) and per-head ([b, p, head]) tensor scales on a GQA value site."""
    B, P = tokens.shape
    a = logits(llama, tokens, edit_hooks(llama, "value_excl_self", torch.zeros(B, P, 1)))
    b = logits(llama, tokens, edit_hooks(llama, "value_excl_self", 0.0))
    torch.testing.assert_close(a, b)
    per_head = torch.ones(B, P, 4)
    per_head[..., 2] = 0.0
    c = logits(llama, tokens, edit_hooks(llama, "value_excl_self", per_head))
    d = logits(llama, tokens, edit_hooks(llama, "value_excl_self", 0.0, heads=[2]))
    torch.testing.assert_close(c, d)


def test_an_edit_reads_as_what_it_does():
    e = Edit("value_excl_self", s_par=0.0, layers=(1, 2))
    assert repr(e) == (
        "Edit(site=Site('value_excl_self'), s_par=0.0, s_perp=1.0, layers=(1, 2), skip_first=1, heads=None)"
    )


def test_block_0_is_left_alone_unless_asked(llama, tokens):
    """One default, API and command line: Edit leaves block 0 alone (skip_first=1), as `tlgeo ppl` does."""
    from tlgeo.decomposition.config import PplConfig

    assert Edit("attn", s_par=0.0).skip_first == PplConfig(site="attn").skip_first == 1
    hooks = Edit("attn", s_par=0.0).hooks(llama)
    assert not any(name.startswith("blocks.0.") for name, _ in hooks)
    assert {n.split(".")[1] for n, _ in Edit("attn", s_par=0.0, skip_first=0).hooks(llama)} >= {"0"}
    with pytest.raises(ValueError, match="give skip_first=0"):
        Edit("attn", s_par=0.0, layers=0).hooks(llama)
