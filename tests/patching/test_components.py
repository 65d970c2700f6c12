"""The patchable parts: exactness of their sums, the reference frame, no-op patches, hook hygiene."""

import pytest
import torch

from tlgeo.geometry.patch_parts import part_delta, project_part, value_parts
from tlgeo.patching.components import COMPONENTS, get_component
from tlgeo.patching.exact import patch_hooks
from tlgeo.patching.runs import hook_names, task_runs
from tlgeo.patching.tasks import build_task


# --- the pure math, float64 -------------------------------------------------------------------


def test_parts_sum_to_the_whole_and_perp_is_orthogonal():
    g = torch.Generator().manual_seed(0)
    s, t, r = (torch.randn(5, 7, 16, generator=g, dtype=torch.float64) for _ in range(3))
    whole = part_delta(s, t, r, "whole")
    par, perp = part_delta(s, t, r, "par"), part_delta(s, t, r, "perp")
    torch.testing.assert_close(par + perp, whole)
    torch.testing.assert_close(whole, s - t)
    assert (perp * r).sum(-1).abs().max() < 1e-10
    # par is along r: its cosine with r is +-1
    cos = (par * r).sum(-1) / (par.norm(dim=-1) * r.norm(dim=-1))
    torch.testing.assert_close(cos.abs(), torch.ones_like(cos))


def test_zero_reference_has_no_parallel_part_and_no_nan():
    d = torch.randn(3, 8, dtype=torch.float64)
    r = torch.zeros(3, 8, dtype=torch.float64)
    assert torch.equal(project_part(d, r, "par"), torch.zeros_like(d))
    assert torch.equal(project_part(d, r, "perp"), d)


def test_value_parts_sum_to_z_and_match_a_brute_force():
    g = torch.Generator().manual_seed(1)
    b, q, h, kv, d = 2, 5, 4, 2, 3
    v = torch.randn(b, q, kv, d, generator=g, dtype=torch.float64)
    pattern = torch.softmax(torch.randn(b, h, q, q, generator=g, dtype=torch.float64), -1)
    z = torch.randn(b, q, h, d, generator=g, dtype=torch.float64)
    parts = value_parts(z, v, pattern)
    torch.testing.assert_close(parts.self_msg + parts.nonself, z)
    for i in range(h):
        for t in range(q):
            torch.testing.assert_close(parts.self_msg[:, t, i], pattern[:, i, t, t, None] * v[:, t, i // (h // kv)])


def test_unknown_part_and_component_are_named():
    with pytest.raises(ValueError, match="unknown part"):
        project_part(torch.ones(2), torch.ones(2), "sideways")
    with pytest.raises(ValueError, match="unknown component 'heads'"):
        get_component("heads")


# --- on tiny models ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def setup(llama):
    task = build_task("induction", llama, n=4, seed=0)
    return llama, task, task_runs(llama, task, list(COMPONENTS), layers=[1])


def _patched_logits(model, runs, comps, layer=1, heads=None, frame="patched"):
    src = runs.clean.acts
    mask = None
    if heads is not None:
        mask = torch.zeros(runs.task.n, model.cfg.n_heads)
        mask[:, heads] = 1.0
    hooks = patch_hooks(model, comps, layer, src, heads=mask, frame=frame)
    with torch.no_grad():
        return model.run_with_hooks(runs.corrupted.tokens, fwd_hooks=hooks)[:, -1]


def test_components_of_a_head_together_equal_the_whole_head(setup):
    model, task, runs = setup
    whole = _patched_logits(model, runs, ["head"], heads=[1])
    for parts in (["self", "nonself"], ["self", "nonself_par", "nonself_perp"], ["head_par", "head_perp"]):
        got = _patched_logits(model, runs, parts, heads=[1])
        torch.testing.assert_close(got, whole, rtol=1e-4, atol=1e-4, msg=f"{parts}")
    # and the whole-head patch is TransformerLens's: copy hook_z[:, :, head] from the clean run
    name = "blocks.1.attn.hook_z"

    def copy(z, hook):
        z = z.clone()
        z[:, :, 1] = runs.clean.acts[name][:, :, 1]
        return z

    with torch.no_grad():
        ref = model.run_with_hooks(runs.corrupted.tokens, fwd_hooks=[(name, copy)])[:, -1]
    torch.testing.assert_close(whole, ref, rtol=1e-5, atol=1e-5)


def test_a_part_changes_the_logits_and_parts_differ(setup):
    model, task, runs = setup
    base = _patched_logits(model, runs, ["mlp_par"], heads=None) * 0  # shape only
    with torch.no_grad():
        corrupted = model(runs.corrupted.tokens)[:, -1]
    par = _patched_logits(model, runs, ["head_par"], heads=[0])
    perp = _patched_logits(model, runs, ["head_perp"], heads=[0])
    assert base.shape == corrupted.shape
    assert not torch.allclose(par, corrupted) and not torch.allclose(perp, corrupted)
    assert not torch.allclose(par, perp)


def test_patching_a_run_from_itself_leaves_the_logits_unchanged(setup):
    model, task, runs = setup
    with torch.no_grad():
        clean = model(runs.clean.tokens)
    for c in COMPONENTS:
        hooks = patch_hooks(model, [c], 1, runs.clean.acts)
        with torch.no_grad():
            got = model.run_with_hooks(runs.clean.tokens, fwd_hooks=hooks)
        torch.testing.assert_close(got, clean, rtol=0, atol=1e-5, msg=c)


def test_patched_frame_keeps_the_patched_runs_orthogonal_part(setup):
    """frame='patched': after a head_par patch, the attention output's change is along the patched run's
    resid_pre (its orthogonal part is the patched run's own); frame='source' projects on the clean run's."""
    model, task, runs = setup
    seen = {}

    def grab(key):
        def fn(x, hook):
            seen[key] = x.detach().clone()

        return fn

    mask = torch.zeros(task.n, model.cfg.n_heads)
    mask[:, 2] = 1.0
    for frame in ("patched", "source"):
        hooks = patch_hooks(model, ["head_par"], 1, runs.clean.acts, heads=mask, frame=frame)
        with torch.no_grad():
            model.run_with_hooks(runs.corrupted.tokens, fwd_hooks=hooks + [("blocks.1.hook_attn_out", grab(frame))])
    base = runs.corrupted.acts["blocks.1.hook_attn_out"]
    r_patched = runs.corrupted.acts["blocks.1.hook_resid_pre"]
    r_source = runs.clean.acts["blocks.1.hook_resid_pre"]
    for frame, r, other in (("patched", r_patched, r_source), ("source", r_source, r_patched)):
        d = (seen[frame] - base).double()
        assert d.norm() > 0
        perp_own = d - ((d * r).sum(-1) / (r * r).sum(-1)).unsqueeze(-1) * r
        perp_other = d - ((d * other).sum(-1) / (other * other).sum(-1)).unsqueeze(-1) * other
        assert perp_own.norm() < 1e-4 * d.norm() < perp_other.norm()


def test_hooks_run_once_and_are_removed_after_an_exception(setup):
    model, task, runs = setup
    with torch.no_grad():
        before = model(runs.corrupted.tokens)
    calls = []
    hooks = patch_hooks(model, ["nonself_par"], 1, runs.clean.acts)
    counted = [(n, (lambda f: lambda x, hook: (calls.append(hook.name), f(x, hook))[1])(f)) for n, f in hooks]
    with torch.no_grad():
        model.run_with_hooks(runs.corrupted.tokens, fwd_hooks=counted)
    assert len(calls) == len(hooks)

    def boom(x, hook):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"), torch.no_grad():
        model.run_with_hooks(runs.corrupted.tokens, fwd_hooks=hooks + [("blocks.1.hook_resid_post", boom)])
    with torch.no_grad():
        after = model(runs.corrupted.tokens)
    assert torch.equal(after, before)
    assert not any(len(hp.fwd_hooks) for hp in model.hook_dict.values())


def test_patches_that_disagree_on_a_hook_are_refused(setup):
    model, task, runs = setup
    with pytest.raises(ValueError, match="different ways"):
        patch_hooks(model, ["head", "self"], 1, runs.clean.acts)
    with pytest.raises(ValueError, match="heads apply only"):
        patch_hooks(model, ["mlp"], 1, runs.clean.acts, heads=torch.ones(task.n, model.cfg.n_heads))


def test_hook_names_cover_every_read(llama):
    names = hook_names(llama, ["head_par", "nonself", "mlp"], [0])
    assert {
        "blocks.0.hook_resid_pre",
        "blocks.0.hook_attn_out",
        "blocks.0.attn.hook_z",
        "blocks.0.attn.hook_v",
        "blocks.0.attn.hook_pattern",
        "blocks.0.hook_mlp_out",
        "blocks.0.hook_resid_mid",
    } == set(names)


def test_parallel_blocks_take_resid_pre_as_the_mlp_reference(gpt_neox):
    names = hook_names(gpt_neox, ["mlp_par"], [0])
    assert "blocks.0.hook_resid_pre" in names and "blocks.0.hook_resid_mid" not in names


@pytest.mark.parametrize("comp", ["head", "head_par", "head_perp", "self", "nonself_par", "nonself_perp"])
def test_head_deltas_are_the_one_head_deltas(setup, comp):
    model, task, runs = setup
    c = get_component(comp)
    roles = c.site.read_hooks(model)
    acts = lambda run: {  # noqa: E731
        "target": run.acts[f"blocks.1.{c.site.target}"],  # noqa: E731
        **{r: run.acts[f"blocks.1.{h}"] for r, h in roles},
    }
    w = model.blocks[1].attn.W_O
    every = c.head_deltas(acts(runs.corrupted), acts(runs.clean), pos=None, W_O=w)
    for h in range(model.cfg.n_heads):
        mask = torch.zeros(task.n, model.cfg.n_heads)
        mask[:, h] = 1.0
        one = c.delta(acts(runs.corrupted), acts(runs.clean), heads=mask, pos=None, W_O=w)
        got = every[:, :, h] if c.quantity == "write" else every * mask[:, None, :, None]
        torch.testing.assert_close(got, one, rtol=1e-5, atol=1e-6)


def test_heads_that_add_up_pass_and_a_norm_after_W_O_is_caught(setup):
    from tlgeo.patching.runs import RunCache, TaskRuns, check_separable_heads

    model, task, runs = setup
    check_separable_heads(model, runs, [1])  # Llama: attn_out = sum_h z^h W_O^h
    acts = dict(runs.clean.acts)
    out = acts["blocks.1.hook_attn_out"]
    acts["blocks.1.hook_attn_out"] = out / out.norm(dim=-1, keepdim=True)  # as if normed after W_O
    normed = TaskRuns(task, RunCache(runs.clean.tokens, acts, runs.clean.metric, runs.clean.hits), runs.corrupted)
    with pytest.raises(ValueError, match="block 1: the attention output is not the sum"):
        check_separable_heads(model, normed, [1])
