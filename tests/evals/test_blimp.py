"""BLiMP minimal pairs: the offline paradigms, scoring whole sentences, accuracy with CIs."""

import pytest
import torch

from tlgeo.evals.blimp import AGREEMENT, MinimalPair, accuracy_rows, evaluate_blimp, load_blimp, pair_correct, pair_nll
from tlgeo.hooks.edits import Edit


def test_the_six_agreement_paradigms_are_offline():
    for name in AGREEMENT:
        pairs = load_blimp(name)
        assert len(pairs) == 1000 and pairs[0].paradigm == name and pairs[0].good != pairs[0].bad
    first = load_blimp(AGREEMENT[0], limit=2)
    assert [p.good for p in first] == ["Paula references Robert.", "Most legislatures haven't disliked children."]
    with pytest.raises(ValueError, match="unknown BLiMP paradigm 'anaphor_gender'"):
        load_blimp("anaphor_gender")
    with pytest.raises(ValueError, match="limit must be"):
        load_blimp(AGREEMENT[0], limit=0)


def test_accuracy_per_paradigm_and_pooled():
    correct = torch.tensor([True, True, False, True, False, False])
    df = accuracy_rows(correct, ["a", "a", "a", "b", "b", "b"], n_boot=200).set_index("paradigm")
    assert df.loc["a", "accuracy"] == pytest.approx(200 / 3) and df.loc["b", "accuracy"] == pytest.approx(100 / 3)
    assert df.loc["pooled", "accuracy"] == 50.0 and df.loc["pooled", "n"] == 6
    assert (df["ci_low"] <= df["accuracy"]).all() and (df["accuracy"] <= df["ci_high"]).all()
    assert pair_correct(torch.tensor([1.0, 2.0]), torch.tensor([2.0, 2.0])).tolist() == [True, False]  # a tie is wrong


def test_pairs_score_whole_sentences_under_hooks(llama):
    pairs = [
        MinimalPair("The dogs bark.", "The dogs barks.", "x", "0"),
        MinimalPair("A cat sleeps here.", "A cat sleep here.", "x", "1"),
    ]
    good, bad = pair_nll(llama, pairs)
    assert good.shape == bad.shape == (2,) and (good > 0).all() and not torch.equal(good, bad)
    noop, _ = pair_nll(llama, pairs, fwd_hooks=Edit("attn", s_par=1.0).hooks(llama))
    assert torch.equal(noop, good)
    edited, _ = pair_nll(llama, pairs, fwd_hooks=Edit("attn", s_par=0.0).hooks(llama))
    assert not torch.allclose(edited, good)
    with pytest.raises(ValueError, match="no minimal pairs"):
        pair_nll(llama, [])


def test_evaluate_blimp_on_a_tiny_model(llama):
    df = evaluate_blimp(llama, AGREEMENT[:2], limit=4, n_boot=100)
    assert list(df["paradigm"]) == [*AGREEMENT[:2], "pooled"] and list(df["n"]) == [4, 4, 8]
    assert df["accuracy"].between(0, 100).all()
