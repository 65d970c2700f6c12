"""Every analysis on every family: each one's own invariant where the support matrix says it runs, and a
one-line refusal before any work where it says no."""

import numpy as np
import pytest
import torch

from tlgeo.runner.analysis import analyses
from tlgeo.families import FAMILIES, UnsupportedError, support
from tlgeo.hooks.perturbation import RESID_POST, Perturbation
from tlgeo.hooks.resume import readout, resume_forward
from tlgeo.report.registry import load_analyses

from .conftest import ATTENTION

TOKENS = torch.randint(1, 256, (2, 12), generator=torch.Generator().manual_seed(1))
load_analyses()  # every analysis's support column (its record's rule), for the parametrisations below


@pytest.mark.parametrize("family", list(FAMILIES))
def test_resumed_forwards_and_the_readout_equal_the_full_forward(family_model, family):
    """What the sweeps, direction-vs-magnitude and patching resume from (Bloom's ALiBi and OPT-350m's
    project_in need tlgeo's own resumption: the bridge's start_at_layer fails on them)."""
    model = family_model(family)
    with torch.no_grad():
        full, cache = model.run_with_cache(TOKENS)  # (leaves the HF config's output_attentions on)
        n = model.cfg.n_layers
        for layer in range(1, n):
            for rows in (slice(None), slice(1)):  # one row: Bloom and Falcon indexed it as attention weights
                torch.testing.assert_close(
                    resume_forward(model, cache[f"blocks.{layer}.hook_resid_pre"][rows], layer),
                    full[rows],
                    rtol=1e-5,
                    atol=1e-5,
                )
        last = cache[f"blocks.{n - 1}.hook_resid_post"]
        torch.testing.assert_close(readout(model, last), full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_direction_and_magnitude_perturbations_are_exact(family_model, family):
    """Each state at resid_post moves by exactly delta = 0.2 of its norm; the angle perturbation keeps the norm."""
    model = family_model(family)
    for kind in ("magnitude", "angle"):
        seen = []
        rec = (RESID_POST_NAME, lambda x, hook: seen.append(x.detach().double()))
        with torch.no_grad():
            model.run_with_hooks(TOKENS, fwd_hooks=[rec])
            move = Perturbation(kind, 0.2, layers=1, relative=True).hooks(model)
            model.run_with_hooks(TOKENS, fwd_hooks=move + [rec])
        clean, moved = seen
        torch.testing.assert_close((moved - clean).norm(dim=-1), 0.2 * clean.norm(dim=-1), rtol=1e-4, atol=1e-5)
        if kind == "angle":
            torch.testing.assert_close(moved.norm(dim=-1), clean.norm(dim=-1), rtol=1e-4, atol=1e-5)


RESID_POST_NAME = f"blocks.1.{RESID_POST.target}"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_pdsf_rotations_with_and_without_the_cache(family_model, family):
    """A persistent D-subspace rotation gives the same greedy continuations with the KV (or state-space)
    cache as without it; the prediction directions read the residual (OPT-350m: through project_out)."""
    from tlgeo.pdsf import condition_bases, greedy_continuations, pdsf_states
    from tlgeo.pdsf.interventions import rotation_edit
    from tlgeo.pdsf.prompts import PromptSet

    model = family_model(family)
    texts = [f"{w} {v} x{i}" for i, (w, v) in enumerate(zip(["ab", "cd", "ef", "gh"] * 2, ["ij", "kl"] * 4))]
    ps = PromptSet("tiny", texts, ["g0"] * 4 + ["g1"] * 4, [f"p{i}" for i in range(8)])
    st = pdsf_states(model, ps, bos=True)
    assert st.u.shape == (8, model.cfg.d_model) and torch.isfinite(st.u).all()
    cb = condition_bases(st.states.states[2], st.u, ("D",), k_D=3, k_S=2)
    fn = rotation_edit(cb, "D", 2, 42, "haar")
    cached = greedy_continuations(model, st.tokens, 4, batch_size=3, edit=fn)
    assert torch.equal(cached, greedy_continuations(model, st.tokens, 4, batch_size=3, edit=fn, use_cache=False))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_tokenwise_pool_holds_the_residual_stream_and_patching_it_back_is_a_no_op(family_model, family, tmp_path):
    from tlgeo.tokenwise import collect_pool
    from tlgeo.tokenwise.output_kl import patch_kl

    model = family_model(family)
    pool = collect_pool(model, TOKENS, tmp_path / "p", dtype="float32", batch_size=2)
    with torch.no_grad():
        _, cache = model.run_with_cache(TOKENS[:1])
    last = model.cfg.n_layers - 1
    for l, name in [(0, "blocks.0.hook_resid_pre"), (last + 1, f"blocks.{last}.hook_resid_post")]:
        np.testing.assert_allclose(pool.states(l)[:11], cache[name][0, 1:].numpy(), rtol=1e-5, atol=1e-5)
    idx = np.array([0, 5, 13])  # patching a layer's own clean output back in changes nothing
    clean = {l: torch.from_numpy(np.array(pool.states(l + 1)[idx])) for l in range(pool.n_layers)}
    assert patch_kl(model, pool, idx, clean, batch_size=2)["kl_following"].max() < 1e-5


@pytest.mark.parametrize("family", ATTENTION)
def test_patching_sweep_equals_one_full_forward_per_patch(family_model, family):
    """The batched, resumed exact sweep equals patching one head per full forward; a head's parts add up
    to the whole head (head_par / head_perp where the family's heads add up to hook_attn_out)."""
    from tlgeo.patching.exact import exact_sweep, patch_hooks
    from tlgeo.patching.runs import task_runs
    from tlgeo.patching.tasks import build_task

    model = family_model(family)
    split = "head_perp" if support(family, "patching").status == "yes" else "nonself_perp"
    task = build_task("induction", model, n=3, seed=1)
    runs = task_runs(model, task, ["head", split, "nonself_par", "mlp_perp"], layers=[1])
    rows = exact_sweep(model, runs, ["head", split, "mlp_perp"], layers=[1], direction="denoise", max_rows=5)
    for r in rows:
        mask = None
        if r["head"] != -1:
            mask = torch.zeros(task.n, model.cfg.n_heads)
            mask[:, r["head"]] = 1.0
        hooks = patch_hooks(model, [r["component"]], 1, runs.clean.acts, heads=mask)
        with torch.no_grad():
            want = task.score(model.run_with_hooks(runs.corrupted.tokens, fwd_hooks=hooks)[:, -1])
        torch.testing.assert_close(torch.tensor(r["patched"]), want, rtol=1e-4, atol=1e-4)


CONTRACT = ["decomposition", "dirmag", "tokenwise", "pdsf", "patching", "compression"]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_refused_analyses_fail_before_any_work(family_model, family, tmp_path, monkeypatch):
    """Every refused cell raises the matrix's reason in one line before a forward or a file."""
    load_analyses()
    model = family_model(family)
    refused = [(n, n) for n, a in analyses().items() if a.support is not None and not support(family, n).ok]
    assert {n for n, _ in refused} <= set(CONTRACT)
    if not FAMILIES[family].attention:
        refused += [("decomposition", "attn"), ("geometries", "attn")]  # the sites they read need attention
    if not refused:
        pytest.skip(f"{family} refuses no analysis")
    monkeypatch.setattr(model, "forward", lambda *a, **k: pytest.fail("ran a forward"))
    for name, column in refused:
        a = analyses()[name]
        with pytest.raises(UnsupportedError) as err:
            a.run(model, a.config(**a.tiny), out=tmp_path / name)
        assert str(err.value) == f"{column} on {model.cfg.architecture}: {support(family, column).why}"
        assert not (tmp_path / name).exists() or not any((tmp_path / name).iterdir())


@pytest.mark.parametrize("family", [f for f, fam in FAMILIES.items() if support(fam, "compression").ok])
def test_wanda_prunes_every_dense_family(family, tmp_path):
    """llmcompressor's Wanda (2:4) through tlgeo on each family the compression diagnosis supports: the
    pattern holds on every pruned weight and the result boots as a dense model."""
    pytest.importorskip("llmcompressor")
    from tlgeo.compression.llmc import compress_model
    from tlgeo.models import load_model, save_tiny_model

    base = save_tiny_model(tmp_path / "base", family)
    calib = [list(range(1, 33)), list(range(40, 72))]
    man = compress_model(base, "wanda_2_4", tmp_path / "w", calib=calib)
    assert man["checks"]["pattern_ok"] and man["checks"]["n_weights"] > 0
    assert torch.isfinite(load_model(str(tmp_path / "w"))(TOKENS)).all()
