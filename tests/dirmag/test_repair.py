"""Causal repair: clean components put back into perturbed runs, on tiny models."""

import math

import pandas as pd

import pytest
import torch

from tlgeo.dirmag.engine import SweepGrid, sentence_batches, sentence_nll
from tlgeo.dirmag.plots import plot_repair
from tlgeo.dirmag.repair import causal_repair, repair_hooks
from tlgeo.hooks.perturbation import Perturbation


def test_no_perturbation_recovers_nothing_and_changes_nothing(llama, sentences):
    df = causal_repair(llama, sentences, SweepGrid(deltas=[0.0], seeds=1), batch_size=4)
    assert len(df) == 2 * 2 and set(df["repair"]) == {"attn", "norm"}
    assert df["recovery"].isna().all()  # no damage to recover
    assert ((df["repaired_loss"] - df["clean_loss"]).abs() < 1e-5).all()


@pytest.mark.parametrize("model_name", ["llama", "gpt_neox"])
def test_repaired_runs_equal_full_forwards_with_the_clean_parts_put_back(model_name, request, sentences):
    model = request.getfixturevalue(model_name)
    grid = SweepGrid(deltas=[0.08], kinds=["angle"], seeds=1, layers=(1, 2))
    df = causal_repair(model, sentences, grid, batch_size=3).set_index("repair")
    pert = Perturbation("angle", 0.08, seed=42, layers=(1, 2))
    by_hand = {}
    for repair in ("attn", "norm"):
        losses = []
        with torch.inference_mode():
            for toks, lengths in sentence_batches(model, sentences, batch_size=3):
                names = [
                    f"blocks.{l}.{h}"
                    for l in (1, 2)
                    for h in (("hook_attn_out",) if repair == "attn" else ("ln1.hook_out", "ln2.hook_out"))
                ]
                _, cache = model.run_with_cache(toks, names_filter=names)
                hooks = pert.hooks(model) + repair_hooks(repair, (1, 2), {n: cache[n] for n in names})
                losses.append(sentence_nll(model.run_with_hooks(toks, fwd_hooks=hooks), toks, lengths))
        by_hand[repair] = float(torch.cat(losses).mean())
        assert df.loc[repair, "repaired_loss"] == pytest.approx(by_hand[repair], abs=1e-5)
    assert (
        df["unrepaired_loss"].nunique() == 1 and (df["unrepaired_loss"] != df["clean_loss"]).all()
    )  # same perturbation
    assert all(math.isfinite(v) for v in df["recovery"])
    assert by_hand["attn"] != by_hand["norm"]


def test_a_rerun_reads_the_log_and_bad_repairs_fail(llama, sentences, tmp_path):
    grid = SweepGrid(deltas=[0.05], kinds=["magnitude"], seeds=1)
    log = tmp_path / "repair.jsonl"
    first = causal_repair(llama, sentences, grid, log_path=log)
    assert len(log.read_text().splitlines()) == 1 and len(first) == 2  # one line per perturbation, both repairs
    again = causal_repair(llama, sentences, grid, log_path=log)
    assert again["repaired_loss"].tolist() == first["repaired_loss"].tolist()
    assert len(log.read_text().splitlines()) == 1
    fig = plot_repair(pd.concat([first, first.assign(delta=5.0, relative=False)]))
    assert len(fig.axes) == 2 and [a.get_title() for a in fig.axes] == ["delta 0.05", "delta 5"]
    assert any(l.get_label() == "paper (Pythia-410M)" for l in fig.axes[1].get_lines())  # only at delta 5
    assert not any(l.get_label() == "paper (Pythia-410M)" for l in fig.axes[0].get_lines())
    with pytest.raises(ValueError, match="unknown repair"):
        causal_repair(llama, sentences, grid, repairs=("mlp",))


def test_repair_layers_after_a_single_perturbed_block(llama, sentences):
    grid = SweepGrid(deltas=[0.5], kinds=["angle"], seeds=1)  # tiny llama: block 1 perturbed
    with pytest.warns(UserWarning, match="restores nothing"):
        same = causal_repair(llama, sentences, grid)
    assert (same["repaired_loss"] == same["unrepaired_loss"]).all()  # block 1's own parts precede its output
    after = causal_repair(llama, sentences, grid, repair_layers=[2])
    assert (after["repaired_loss"] != after["unrepaired_loss"]).all()
    assert all(list(v) == [2] for v in after["repair_layers"])
    with pytest.raises(ValueError, match="out of range"):
        causal_repair(llama, sentences, grid, repair_layers=[5])
    with pytest.raises(ValueError, match="no perturbation reaches them"):
        causal_repair(llama, sentences, grid, repair_layers=[0, 1])
