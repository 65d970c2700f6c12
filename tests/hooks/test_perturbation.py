"""Perturbation hooks on tiny models: what moves, by how much, reproducibly, and nothing else."""

import pytest
import torch

from tlgeo.hooks.perturbation import Perturbation, middle_third


def _moves(model, tokens, pert):
    """Logits, and the resid_post before / after the perturbation at every perturbed layer."""
    before, after = {}, {}
    names = [f"blocks.{layer}.hook_resid_post" for layer in pert.chosen_layers(model.cfg)]

    def keep(store, name):
        return lambda x, hook: store.__setitem__(name, x.clone())  # the bridge names the hook point blocks.L.hook_out

    hooks = [(n, keep(before, n)) for n in names] + pert.hooks(model) + [(n, keep(after, n)) for n in names]
    with torch.inference_mode():
        logits = model.run_with_hooks(tokens, fwd_hooks=hooks)
    return logits, before, after


def test_middle_third():
    assert middle_third(24) == list(range(8, 16)) and middle_third(30) == list(range(10, 20))
    assert middle_third(3) == [1] and middle_third(1) == [0]


@pytest.mark.parametrize("kind", ["magnitude", "angle"])
def test_exact_moves_every_token_by_delta(tiny, tokens, kind):
    pert = Perturbation(kind, 0.05, layers=(0, 2))  # tiny models' states have norms ~0.2
    logits, before, after = _moves(tiny, tokens, pert)
    assert set(before) == {"blocks.0.hook_resid_post", "blocks.2.hook_resid_post"}
    for name in before:
        moved = (after[name] - before[name]).norm(dim=-1)
        assert (before[name].norm(dim=-1) > 0.025).all()  # no token clipped at this delta
        torch.testing.assert_close(moved, torch.full_like(moved, 0.05), atol=1e-5, rtol=1e-4)
        if kind == "angle":
            torch.testing.assert_close(after[name].norm(dim=-1), before[name].norm(dim=-1), atol=1e-4, rtol=1e-5)
    with torch.inference_mode():
        assert not torch.allclose(logits, tiny(tokens))


@pytest.mark.parametrize("kind", ["magnitude", "angle"])
@pytest.mark.parametrize("mode", ["exact", "faithful"])
def test_zero_delta_leaves_logits_unchanged_bit_for_bit(llama, tokens, kind, mode):
    with torch.inference_mode():
        clean = llama(tokens)
        edited = llama.run_with_hooks(tokens, fwd_hooks=Perturbation(kind, 0.0, mode=mode).hooks(llama))
    assert torch.equal(clean, edited)


@pytest.mark.parametrize("kind", ["magnitude", "angle"])
def test_same_seed_same_perturbation(llama, tokens, kind):
    def run(seed):
        with torch.inference_mode():
            return llama.run_with_hooks(tokens, fwd_hooks=Perturbation(kind, 1.0, seed=seed).hooks(llama))

    a, b, c = run(42), run(42), run(43)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_faithful_angle_hits_the_mean_displacement_and_reuses_its_direction(llama, tokens):
    pert = Perturbation("angle", 0.05, mode="faithful", layers=(0, 1, 2))
    stats: list[dict] = []
    with torch.inference_mode():
        llama.run_with_hooks(tokens, fwd_hooks=pert.hooks(llama, stats=stats))
    assert [s["layer"] for s in stats] == [0, 1, 2]
    for s in stats:
        assert abs(s["mean_displacement"] - 0.05) < 1e-4 and s["n_tokens"] == tokens.numel()
    # one hooks() call = one direction per tensor shape, reused; a new call (a new seed run) draws afresh
    hooks = pert.hooks(llama)
    with torch.inference_mode():
        first = llama.run_with_hooks(tokens, fwd_hooks=hooks)
        second = llama.run_with_hooks(tokens, fwd_hooks=hooks)
    assert torch.equal(first, second)


def test_faithful_magnitude_signs_are_redrawn_every_forward(llama, tokens):
    hooks = Perturbation("magnitude", 2.0, mode="faithful").hooks(llama)
    with torch.inference_mode():
        first = llama.run_with_hooks(tokens, fwd_hooks=hooks)
        second = llama.run_with_hooks(tokens, fwd_hooks=hooks)
    assert not torch.equal(first, second)  # the notebook's quirk, kept in faithful mode


def test_relative_delta_is_a_fraction_of_each_norm(llama, tokens):
    pert = Perturbation("magnitude", 0.25, relative=True, layers=1)
    _, before, after = _moves(llama, tokens, pert)
    (name,) = before
    ratio = after[name].norm(dim=-1) / before[name].norm(dim=-1)
    assert torch.allclose((ratio - 1).abs(), torch.full_like(ratio, 0.25), atol=1e-4)


def test_stats_report_clipped_tokens(llama, tokens):
    stats: list[dict] = []
    with torch.inference_mode():
        llama.run_with_hooks(tokens, fwd_hooks=Perturbation("angle", 1e6, layers=1).hooks(llama, stats=stats))
    assert stats[0]["n_clipped"] == tokens.numel()  # delta far beyond 2 ||h||: every token clipped


def test_hooks_run_once_and_are_removed_after_an_exception(llama, tokens):
    calls = []
    pert = Perturbation("angle", 0.3, layers=(0, 2))
    hooks = pert.hooks(llama)
    counted = [(n, (lambda f: lambda x, hook: calls.append(hook.name) or f(x, hook))(f)) for n, f in hooks]

    def boom(x, hook):
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"), torch.inference_mode():
        llama.run_with_hooks(tokens, fwd_hooks=counted + [("blocks.2.hook_resid_post", boom)])
    with torch.inference_mode():
        llama.run_with_hooks(tokens, fwd_hooks=counted)
        clean, plain = llama(tokens), llama(tokens)
    assert torch.equal(clean, plain)  # nothing left attached
    assert len(calls) == 4  # two layers, two forwards: once per layer and forward


def test_works_on_any_site_and_on_gpt_neox(gpt_neox, tokens):
    with torch.inference_mode():
        clean = gpt_neox(tokens)
        for site in ("resid_post", "attn", "value_full"):
            out = gpt_neox.run_with_hooks(tokens, fwd_hooks=Perturbation("angle", 0.2, site=site).hooks(gpt_neox))
            assert torch.isfinite(out).all() and not torch.allclose(out, clean)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(kind="size", delta=1.0), ValueError, "unknown perturbation kind"),
        (dict(kind="angle", delta=-1.0), ValueError, "delta must be"),
        (dict(kind="angle", delta=float("nan")), ValueError, "delta must be"),
        (dict(kind="angle", delta=1.0, mode="rough"), ValueError, "unknown perturbation mode"),
        (dict(kind="magnitude", delta=1.0, flip="mirror"), ValueError, "unknown flip"),
        (dict(kind="angle", delta=1.0, site="nowhere"), KeyError, "unknown site"),
    ],
)
def test_bad_perturbations_raise_clear_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Perturbation(**kwargs)


def test_layer_out_of_range(llama):
    with pytest.raises(IndexError, match="out of range"):
        Perturbation("angle", 1.0, layers=(5,)).hooks(llama)


def test_stats_count_the_shrinks_that_flip(llama, tokens):
    stats: list[dict] = []
    with torch.inference_mode():
        llama.run_with_hooks(tokens, fwd_hooks=Perturbation("magnitude", 1e3, layers=1).hooks(llama, stats=stats))
    share = stats[0]["n_flipped"] / stats[0]["n_tokens"]
    assert 0.3 < share < 0.7 and stats[0]["n_clipped"] == 0  # every shrink flips (delta >> ||h||): about half


def test_draw_gives_a_batch_its_own_perturbation_and_zero_is_the_old_one(llama, tokens):
    """``draw`` (e.g. a batch's first row) changes the exact mode's signs and directions; 0 keeps the
    (seed, layer) draw of every forward."""
    from tlgeo.hooks.perturbation import Perturbation

    def out(**kw):
        with torch.no_grad():
            return llama.run_with_hooks(tokens, fwd_hooks=Perturbation("magnitude", 0.5, layers=1, **kw).hooks(llama))

    assert torch.equal(out(), out(draw=0)) and torch.equal(out(draw=3), out(draw=3))
    assert not torch.equal(out(draw=3), out(draw=4))
    with pytest.raises(ValueError, match="draw must be a non-negative integer"):
        Perturbation("magnitude", 0.5, draw=-1)
