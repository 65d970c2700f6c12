"""Attribution patching: the first-order term of the exact patch, for every component."""

import pytest
import torch

from tlgeo.patching.attribution import attribution_sweep
from tlgeo.patching.components import COMPONENTS
from tlgeo.patching.exact import exact_sweep
from tlgeo.patching.runs import RunCache, TaskRuns, task_runs
from tlgeo.patching.tasks import build_task


@pytest.fixture(scope="module")
def setup(gpt2):
    task = build_task("induction", gpt2, n=4, seed=2)
    return gpt2, task, task_runs(gpt2, task, list(COMPONENTS))


def _near(runs: TaskRuns, eps: float) -> TaskRuns:
    """A source run eps of the way from the corrupted run to the clean one (activation by activation)."""
    c, k = runs.clean, runs.corrupted
    acts = {n: k.acts[n] + eps * (c.acts[n] - k.acts[n]) for n in c.acts}
    return TaskRuns(runs.task, RunCache(c.tokens, acts, c.metric, c.hits), k)


@pytest.mark.parametrize("component", ["head", "head_par", "head_perp", "mlp", "mlp_par", "mlp_perp"])
def test_attribution_is_the_derivative_of_the_exact_patch(setup, component):
    """For a patch linear in the source (these components, patched-run frame), the exact effect of a
    source eps of the way to the clean run is eps times the attribution estimate, up to O(eps^2)."""
    model, task, runs = setup
    eps = 1e-3
    near = _near(runs, eps)
    ex = exact_sweep(model, near, [component], layers=[1])
    at = attribution_sweep(model, runs, [component], layers=[1])
    base = runs.corrupted.metric
    for e, a in zip(ex, at):
        assert (e["component"], e["layer"], e["head"]) == (a["component"], a["layer"], a["head"])
        slope_exact = (torch.tensor(e["patched"]) - base) / eps
        slope_attr = torch.tensor(a["patched"]) - base
        torch.testing.assert_close(slope_exact, slope_attr, rtol=2e-2, atol=2e-3)


def test_attribution_tracks_exact_patching_on_every_component(setup):
    model, task, runs = setup
    ex = {
        (r["component"], r["layer"], r["head"]): torch.tensor(r["patched"]).mean()
        for r in exact_sweep(model, runs, list(COMPONENTS))
    }
    at = {
        (r["component"], r["layer"], r["head"]): torch.tensor(r["patched"]).mean()
        for r in attribution_sweep(model, runs, list(COMPONENTS), batch_size=3)
    }  # two batches
    assert ex.keys() == at.keys()
    for comp in COMPONENTS:
        keys = [k for k in ex if k[0] == comp]
        x = torch.stack([ex[k] for k in keys])
        y = torch.stack([at[k] for k in keys])
        if len(keys) > 2:
            assert torch.corrcoef(torch.stack([x, y]))[0, 1] > 0.8, comp


def test_a_source_equal_to_the_target_has_zero_attribution(setup):
    model, task, runs = setup
    same = TaskRuns(task, runs.corrupted, runs.corrupted)
    for r in attribution_sweep(model, same, list(COMPONENTS), layers=[0, 2]):
        torch.testing.assert_close(torch.tensor(r["patched"]), runs.corrupted.metric, rtol=0, atol=1e-6)
