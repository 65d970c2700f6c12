"""What each site means on every family: the residual bookkeeping its reference assumes, the value
space its per-head sites split, exactness of the edits, and a one-line refusal where it means nothing."""

import numpy as np
import pytest
import torch

from tlgeo.families import FAMILIES, SITE_COLUMNS, UnsupportedError, support
from tlgeo.geometry.value_space import kv_head_index
from tlgeo.hooks.edits import Edit, edit_hooks
from tlgeo.hooks.sites import SITES

from .conftest import ATTENTION

TOKENS = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))  # longer than the windows (8)


def _run(model, hooks=()):
    with torch.no_grad():
        return model.run_with_hooks(TOKENS, fwd_hooks=list(hooks))


_READ = (
    "hook_resid_pre",
    "hook_resid_mid",
    "hook_resid_post",
    "hook_attn_out",
    "hook_mlp_out",
    "ln1.hook_in",
    "ln1.hook_out",
    "ln2.hook_in",
    "ln2.hook_out",
    "attn.hook_pattern",
    "attn.hook_v",
    "attn.hook_z",
)


def _cache(model, layer=1):
    names = {f"blocks.{layer}.{h}" for h in _READ} & set(model.hook_dict)
    with torch.no_grad():
        _, cache = model.run_with_cache(TOKENS, names_filter=lambda n: n in names)
    return {k.split(".", 2)[2]: v.double() for k, v in cache.items()}


def _record(seen, key):
    def fn(x, hook):
        seen[key] = x.detach().double()

    return fn


def test_every_site_has_a_column():
    assert set(SITES) == set(SITE_COLUMNS)


@pytest.mark.parametrize("family", ATTENTION)
def test_each_update_is_what_the_residual_receives(family_model, family):
    """The attn and mlp sites' updates add to their references to give the next residual state: the
    normed output where a norm follows the sublayer (Gemma, OLMo-2), resid_pre for both branches of a
    parallel block, and the renormalised state post-LN (OPT-350m), where the reference differs."""
    f, c = FAMILIES[family], _cache(family_model(family))
    pre, post, attn, mlp = c["hook_resid_pre"], c["hook_resid_post"], c["hook_attn_out"], c["hook_mlp_out"]
    tol = dict(atol=1e-5, rtol=1e-5)
    if f.parallel:
        torch.testing.assert_close(pre + attn + mlp, post, **tol)
    elif f.post_ln:  # the sum before each norm; the MLP reads (and adds to) ln1's output
        torch.testing.assert_close(pre + attn, c["ln1.hook_in"], **tol)
        torch.testing.assert_close(c["ln1.hook_out"] + mlp, c["ln2.hook_in"], **tol)
        torch.testing.assert_close(c["ln2.hook_out"], post, **tol)
    else:
        torch.testing.assert_close(pre + attn, c["hook_resid_mid"], **tol)
        torch.testing.assert_close(c["hook_resid_mid"] + mlp, post, **tol)


@pytest.mark.parametrize("family", ATTENTION)
def test_heads_aggregate_values_with_the_pattern(family_model, family):
    """``z = A v`` (each query head reading its KV head): the value space the per-head sites split.
    With sinks the rows sum to less than 1: the sink's mass reaches no value."""
    model = family_model(family)
    c = _cache(model)
    A, v, z = c["attn.hook_pattern"], c["attn.hook_v"], c["attn.hook_z"]
    kv = kv_head_index(z.shape[2], v.shape[2])
    torch.testing.assert_close(torch.einsum("bhqk,bkhd->bqhd", A, v[:, :, kv]), z, atol=1e-6, rtol=1e-5)
    rows = A.sum(-1)
    if FAMILIES[family].sinks:
        assert rows.max() < 1 - 1e-3
    else:
        torch.testing.assert_close(rows, torch.ones_like(rows), atol=1e-5, rtol=0)


@pytest.mark.parametrize("family", ATTENTION)
def test_exclude_self_equals_brute_force(family_model, family):
    """The edit at block 1 equals c_t = o_t - A_tt v_t split against v_t by hand, on every family."""
    model = family_model(family)
    c = _cache(model)
    A, v, z = c["attn.hook_pattern"], c["attn.hook_v"], c["attn.hook_z"]
    vt = v[:, :, kv_head_index(z.shape[2], v.shape[2])]  # [b, t, head, d]
    self_w = torch.diagonal(A, dim1=-2, dim2=-1).transpose(1, 2).unsqueeze(-1)  # [b, t, head, 1]
    cvec = z - self_w * vt
    par = (cvec * vt).sum(-1, keepdim=True) / (vt * vt).sum(-1, keepdim=True).clamp_min(1e-6) * vt
    expected = self_w * vt + 0.3 * par + 0.8 * (cvec - par)
    seen = {}
    hooks = edit_hooks(model, "value_excl_self", 0.3, 0.8, layers=1)
    _run(model, hooks + [("blocks.1.attn.hook_z", _record(seen, "z"))])
    torch.testing.assert_close(seen["z"], expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("site", list(SITES))
def test_site_is_exact_or_refused(family_model, family, site):
    """A supported site's no-op edit leaves the logits bit for bit and its removal changes them; a refused
    one fails at ``.hooks()``, before any forward, with the family's reason in one line."""
    model, s = family_model(family), support(family, site)
    if not s.ok:
        with pytest.raises(UnsupportedError) as err:
            Edit(site).hooks(model)
        assert s.why in str(err.value) and "\n" not in str(err.value)
        return
    base = _run(model)
    assert torch.equal(_run(model, Edit(site).hooks(model)), base)
    out = _run(model, Edit(site, s_par=0.0).hooks(model))
    assert torch.isfinite(out).all() and (out - base).abs().max() > 1e-5


@pytest.mark.parametrize("family", ATTENTION)
def test_diag_edit_keeps_each_rows_own_sum(family_model, family):
    """Removing A_tt rescales the other keys to the row's own sum: 1, or with sinks the sink's share kept."""
    model = family_model(family)
    clean = _cache(model)["attn.hook_pattern"]
    seen = {}
    _run(model, edit_hooks(model, "diag", 0.0, layers=1) + [("blocks.1.attn.hook_pattern", _record(seen, "A"))])
    torch.testing.assert_close(seen["A"].sum(-1), clean.sum(-1), atol=1e-5, rtol=1e-5)
    assert torch.diagonal(seen["A"], dim1=-2, dim2=-1)[..., 1:].abs().max() == 0


@pytest.mark.parametrize("family", [f for f in ATTENTION if FAMILIES[f].post_ln])
def test_post_ln_mlp_reference_is_the_renormalised_state(family_model, family):
    """Post-LN, the MLP's parallel part is taken against ln1's output (what it reads and is added to)."""
    model = family_model(family)
    seen = {}
    hooks = [("blocks.1.ln1.hook_out", _record(seen, "ref"))]
    hooks += edit_hooks(model, "mlp", 0.0, layers=1) + [("blocks.1.hook_mlp_out", _record(seen, "y"))]
    _run(model, hooks)
    assert torch.nn.functional.cosine_similarity(seen["y"], seen["ref"], dim=-1).abs().max() < 1e-4


def test_gradients_flow_through_suppression_on_every_family(family_model):
    """Pretraining's suppression hooks are the sites' edits: gradients reach the weights on every family."""
    for family in FAMILIES:
        model = family_model(family)
        site = "attn" if FAMILIES[family].attention else "block"
        params = [p for p in model.parameters() if p.requires_grad]
        with torch.enable_grad():
            loss = model.run_with_hooks(TOKENS, return_type="loss", fwd_hooks=Edit(site, s_par=0.0).hooks(model))
            grads = torch.autograd.grad(loss, params, allow_unused=True)
        assert any(g is not None and g.abs().sum() > 0 for g in grads), family


@pytest.mark.parametrize("family", list(FAMILIES))
def test_profile_cosines_are_the_updates_against_their_references(family_model, family):
    """The decomposition profile's per-token cosine at block 1 equals the one computed from the cached update
    and reference of each supported residual site (the reference the family's bookkeeping test checks)."""
    from tlgeo.decomposition.observe import parallel_profile

    model, f = family_model(family), FAMILIES[family]
    sites = [s for s in ("attn", "mlp", "block") if support(family, s).ok]
    df = parallel_profile(model, TOKENS, sites=sites, layers=[1])
    c = _cache(model)
    ref = {
        "attn": c["hook_resid_pre"],
        "block": c["hook_resid_pre"],
        "mlp": c["hook_resid_pre"] if f.parallel else c["ln1.hook_out"] if f.post_ln else c.get("hook_resid_mid"),
    }
    upd = {
        "attn": c.get("hook_attn_out"),
        "mlp": c.get("hook_mlp_out"),
        "block": c["hook_resid_post"] - c["hook_resid_pre"],
    }
    for s in sites:
        got = df[(df.site == s) & (df.layer == 1)].sort_values(["seq", "pos"])["cosine"].to_numpy()
        want = torch.nn.functional.cosine_similarity(upd[s], ref[s], dim=-1).flatten().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=s)
