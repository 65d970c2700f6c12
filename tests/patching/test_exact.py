"""The exact sweep: batched over heads and resumed at the patched block, it equals one full forward per patch."""

import pytest
import torch

from tlgeo.patching.exact import exact_sweep, patch_hooks, patched_metric
from tlgeo.patching.runs import position_mask, task_runs
from tlgeo.patching.tasks import build_task


@pytest.fixture(scope="module", params=["llama", "gpt_neox"])
def setup(request):
    model = request.getfixturevalue(request.param)
    task = build_task("induction", model, n=3, seed=1)
    return model, task, task_runs(model, task, ["head", "head_perp", "nonself_par", "mlp_perp"])


def _full_forward_metric(model, runs, comp, layer, head, direction, positions="all"):
    target, source = runs.pair(direction)
    mask = None
    if head is not None:
        mask = torch.zeros(runs.task.n, model.cfg.n_heads)
        mask[:, head] = 1.0
    hooks = patch_hooks(model, [comp], layer, source.acts, heads=mask, pos=position_mask(runs.task, positions))
    with torch.no_grad():
        logits = model.run_with_hooks(target.tokens, fwd_hooks=hooks)[:, -1]
    return runs.task.score(logits)


@pytest.mark.parametrize("direction", ["denoise", "noise"])
def test_batched_resumed_sweep_equals_one_full_forward_per_patch(setup, direction):
    model, task, runs = setup
    rows = exact_sweep(
        model, runs, ["head_perp", "nonself_par", "mlp_perp"], layers=[0, 2], direction=direction, max_rows=5
    )  # 5 rows: heads split over several forwards
    assert len(rows) == 2 * (2 * model.cfg.n_heads + 1)
    for r in rows:
        head = None if r["head"] == -1 else r["head"]
        want = _full_forward_metric(model, runs, r["component"], r["layer"], head, direction)
        torch.testing.assert_close(torch.tensor(r["patched"]), want, rtol=1e-4, atol=1e-4)


def test_patching_only_the_end_position(setup):
    model, task, runs = setup
    got = patched_metric(model, runs, "head", 1, [0, 1], positions="end")
    for i, h in enumerate([0, 1]):
        want = _full_forward_metric(model, runs, "head", 1, h, "denoise", positions="end")
        torch.testing.assert_close(got[i], want, rtol=1e-4, atol=1e-4)
    everywhere = patched_metric(model, runs, "head", 1, [0, 1])
    assert not torch.allclose(got, everywhere)


def test_bad_heads_and_sizes_are_refused_before_a_forward(setup):
    model, task, runs = setup
    with pytest.raises(IndexError, match="out of range"):
        patched_metric(model, runs, "head", 0, [model.cfg.n_heads])
    with pytest.raises(ValueError, match="one per block"):
        patched_metric(model, runs, "mlp", 0, [0])
    with pytest.raises(ValueError, match="max_rows"):
        exact_sweep(model, runs, ["head"], layers=[0], max_rows=0)
    with pytest.raises(ValueError, match="unknown direction"):
        exact_sweep(model, runs, ["head"], layers=[0], direction="sideways")
    with pytest.raises(ValueError, match="no position 'S2'"):
        position_mask(task, "S2")


@pytest.mark.parametrize("max_rows", [5, 256])
def test_the_plan_counts_the_rows_of_the_sweep_s_forwards(llama, max_rows):
    """`tlgeo plan`'s exact step holds as many sequences per forward as the sweep runs (a copy of the
    prompts per head of a block, cut to max_rows): its memory is planned from them."""
    from tlgeo.patching.analysis import ANALYSIS
    from tlgeo.patching.config import PatchingConfig
    from tlgeo.planner import model_shape

    task = build_task("induction", llama, n=3, seed=1)
    comps = ("head_perp", "mlp_perp")
    runs = task_runs(llama, task, comps)
    seen = []

    def rows(module, args, kwargs):
        x = next(a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))
        seen.append(x.shape[0])

    handle = llama.blocks[-1].register_forward_pre_hook(rows, with_kwargs=True)
    try:
        exact_sweep(llama, runs, comps, layers=[0], max_rows=max_rows)
    finally:
        handle.remove()
    cfg = PatchingConfig(tasks=("induction",), prompts=3, methods=("exact",), components=comps, max_rows=max_rows)
    exact = next(w for w in ANALYSIS.plan(model_shape("tiny:llama"), cfg) if w.step.endswith("exact"))
    assert max(seen) == exact.batch == 3 * min(llama.cfg.n_heads, max(1, max_rows // 3))
