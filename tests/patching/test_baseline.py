"""The head_par control: the share of a head's write along the residual, against a randomly rotated write."""

import numpy as np
import pytest
import torch

from tlgeo.patching.analysis import run
from tlgeo.patching.baseline import par_baseline_rows, par_shares
from tlgeo.patching.config import PatchingConfig


def test_planted_shares_one_along_the_write_zero_for_zero_and_no_nan():
    gen = torch.Generator().manual_seed(0)
    z, W_O = torch.randn(2, 3, 1, 5, generator=gen), torch.randn(1, 5, 16, generator=gen)
    write = torch.einsum("bqhd,hdm->bqm", z, W_O)
    noise = torch.randn(2, 3, 1, 16, generator=gen)
    share, rotated, kept = par_shares(z, write, W_O, noise)  # the reference is the write itself
    assert share.dtype == torch.float64 and kept.all()
    torch.testing.assert_close(share, torch.ones_like(share))
    share, rotated, kept = par_shares(z, -3 * write, W_O, noise)  # any multiple of it
    torch.testing.assert_close(share, torch.ones_like(share))
    share, rotated, kept = par_shares(z.bfloat16(), torch.zeros(2, 3, 16), W_O, noise)  # zero reference
    assert (share == 0).all() and (rotated == 0).all() and kept.all()
    z0 = z.clone()
    z0[0, 1] = 0  # a token whose write is zero: left out, not NaN
    share, rotated, kept = par_shares(z0, write, W_O, noise)
    assert not kept[0, 1].any() and kept.sum() == 5
    assert torch.isfinite(share).all() and torch.isfinite(rotated).all() and share[0, 1].item() == 0


def test_on_the_tiny_model_the_rotated_share_is_one_over_d_and_the_share_is_head_pars(llama):
    """The rotated write's share is 1/d_model within its sampling error (pooled over many tokens), and
    ``par_share`` is the energy share of what ``head_par`` copies when a head's whole write is patched in."""
    from tlgeo.patching.components import get_component
    from tlgeo.patching.runs import W_O, task_runs
    from tlgeo.patching.tasks import build_task

    runs = task_runs(llama, build_task("induction", llama, n=16), ["head_par"], [0, 1])
    rows = par_baseline_rows(llama, runs, [0, 1], seed=0)
    d, heads = llama.cfg.d_model, llama.cfg.n_heads
    assert len(rows) == 2 * heads and all(r["par_share_expected"] == 1 / d for r in rows)
    tokens = sum(r["tokens"] for r in rows)
    assert tokens == 2 * heads * runs.clean.tokens.numel()
    pooled = sum(r["par_share_rotated"] * r["tokens"] for r in rows) / tokens
    sd = np.sqrt(2 * (d - 1) / (d * d * (d + 2))) / np.sqrt(tokens)  # cos^2 of a random direction: Beta(1/2, (d-1)/2)
    assert abs(pooled - 1 / d) < 5 * sd
    assert rows == par_baseline_rows(llama, runs, [0, 1], seed=0)  # seeded
    assert rows[heads:] == par_baseline_rows(llama, runs, [1], seed=0)  # a block's rows do not depend on the others
    # par_share = the share of head_par's change in the patched (whole) write, from a run whose heads wrote nothing
    comp, acts = get_component("head_par"), runs.clean.acts
    src = {"z": acts["blocks.1.attn.hook_z"], "ref": acts["blocks.1.hook_resid_pre"]}
    tgt = {"z": torch.zeros_like(src["z"]), "ref": src["ref"]}
    par = comp.head_deltas(tgt, src, pos=None, frame="source", W_O=W_O(llama, 1)).double()
    whole = get_component("head_perp").head_deltas(tgt, src, pos=None, frame="source", W_O=W_O(llama, 1)).double() + par
    want = ((par * par).sum(-1) / (whole * whole).sum(-1)).mean((0, 1))
    got = torch.tensor([r["par_share"] for r in rows[heads:]], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)


def _cfg(**kw):
    base = dict(tasks=("induction",), prompts=4, min_accuracy=0.0, layers=(0, 1), components=("head", "head_par"))
    return PatchingConfig(**{**base, **kw})


def test_the_result_has_the_par_baseline_and_p_q_per_effect(llama, tmp_path):
    res = run(llama, _cfg(), out=tmp_path)
    e = res.effects
    assert {"se", "p", "q", "significant"} <= set(e.columns)
    assert e[["p", "q"]].notna().all().all() and ((e["p"] >= 0) & (e["p"] <= 1)).all()
    assert (e["q"] >= e["p"] - 1e-12).all() and (e["significant"] == (e["q"] < 0.05)).all()
    b = res.par_baseline
    assert len(b) == 2 * llama.cfg.n_heads and set(b["task"]) == {"induction"}
    assert b[["par_share", "par_share_rotated"]].notna().all().all()
    assert (b["par_share_expected"] == 1 / llama.cfg.d_model).all()
    saved = res.load(tmp_path)
    assert saved.par_baseline is not None and len(saved.par_baseline) == len(b)
    assert run(llama, _cfg(components=("head", "self"))).par_baseline is None  # no write split: no control asked for


def test_q_in_the_saved_table_is_over_the_whole_family_when_units_are_saved_apart(llama, tmp_path):
    from tlgeo.patching.analysis import units

    cfg = _cfg()
    whole = run(llama, cfg).effects.set_index(["method", "component", "layer", "head"])
    us = units(llama, cfg)
    first = run(llama, cfg, units=us[::2], out=tmp_path)  # alone, its own families are partial
    run(llama, cfg, units=us[1::2], out=tmp_path)
    saved = first.load(tmp_path).effects.set_index(["method", "component", "layer", "head"])
    np.testing.assert_allclose(saved.loc[whole.index, "q"], whole["q"], rtol=1e-9)
    part = first.effects.set_index(["method", "component", "layer", "head"])
    assert not np.allclose(part["q"], whole.loc[part.index, "q"])  # the check can fail
    csv = (tmp_path / "patching_effects.csv").read_text()
    assert csv.count("\n") == len(whole) + 1
    assert "q" in csv.splitlines()[0].split(",")
    assert pytest.approx(saved["q"].to_numpy()) == first.load(tmp_path).effects["q"].to_numpy()
