"""Attention entropy under perturbations, on a tiny model."""

import pytest
import torch

from tlgeo.dirmag.engine import SweepGrid
from tlgeo.dirmag.entropy import attention_entropy, entropy_hooks
from tlgeo.evals.sentences import sentence_batches
from tlgeo.geometry.value_space import pattern_entropy


def test_no_perturbation_no_shift_and_the_clean_value_by_hand(llama, sentences):
    df = attention_entropy(llama, sentences, SweepGrid(deltas=[0.0, 0.1], kinds=["angle"], seeds=1), batch_size=4)
    assert df.loc[df["delta"] == 0.0, "shift"].abs().max() < 1e-6
    # the clean mean over layers, heads and real positions, computed directly
    totals, n = torch.zeros(()), 0
    with torch.inference_mode():
        for toks, lengths in sentence_batches(llama, sentences, batch_size=4):
            _, cache = llama.run_with_cache(toks, names_filter=lambda name: name.endswith("hook_pattern"))
            for l in range(llama.cfg.n_layers):
                ent = pattern_entropy(cache[f"blocks.{l}.attn.hook_pattern"])  # [b, head, q]
                for j, m in enumerate(lengths.tolist()):
                    totals = totals + ent[j, :, :m].mean(0).sum()
            n += int(lengths.sum())
    expected = float(totals) / n / llama.cfg.n_layers
    assert df["clean_entropy"].iloc[0] == pytest.approx(expected, rel=1e-5)
    moved = df[df["delta"] == 0.1].iloc[0]
    assert moved["shift"] != 0 and len(moved["per_layer"]) == llama.cfg.n_layers
    assert moved["per_layer"][0] == pytest.approx(df["per_layer"].iloc[0][0])  # block 0 is before the perturbation


def test_hooks_count_only_real_positions():
    totals = {}
    hooks = entropy_hooks([0], torch.tensor([2]), totals)
    pattern = torch.tensor([[[[1.0, 0, 0], [0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3]]]])  # the third query is padding
    hooks[0][1](pattern, None)
    assert totals[0].item() == pytest.approx(torch.log(torch.tensor(2.0)).item())
