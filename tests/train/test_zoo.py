"""The zoo's committed models: their weights are the ones zoo.json describes, and their heads are what their
attention scores say (Olsson et al.'s previous-token and induction scores, recomputed here)."""

import json

import pytest

from tlgeo.models import load_model
from tlgeo.train.zoo import ZOO, ZOO_DIR, head_scores, planted_heads, repeated_batch, weights_digest, zoo_model_dir

EXPORTED = sorted(p.name for p in ZOO_DIR.iterdir() if (p / "zoo.json").exists()) if ZOO_DIR.exists() else []


def test_every_zoo_model_is_exported_with_its_record():
    assert set(EXPORTED) == set(ZOO), "a zoo model without its exported directory (scripts/train_zoo.py NAME)"


@pytest.mark.parametrize("name", EXPORTED)
def test_the_weights_and_the_scores_are_what_zoo_json_records(name):
    d = zoo_model_dir(name)
    record = json.loads((d / "zoo.json").read_text())
    assert weights_digest(d) == record["weights_sha256"]
    assert record["command"].startswith("tlgeo train ") and f"--steps {ZOO[name].config.steps}" in record["command"]
    scores = head_scores(load_model(str(d)), duplicates=ZOO[name].duplicates)
    for got, want in zip(scores, record["head_scores"], strict=True):
        assert (got["layer"], got["head"]) == (want["layer"], want["head"])
        for k in ("previous_token", "induction", "duplicate_token", "copying"):
            assert got[k] == pytest.approx(want[k], abs=2e-4), (got, want)
    assert planted_heads(scores) == record["planted"]


def test_the_llama_zoo_model_has_a_previous_token_head_before_its_induction_heads():
    record = json.loads((zoo_model_dir("induction-llama") / "zoo.json").read_text())
    planted = record["planted"]
    assert planted["previous_token"] == [[0, 2]]
    assert planted["induction"] == [[1, 0], [1, 1], [1, 2]]
    by = {(r["layer"], r["head"]): r for r in record["head_scores"]}
    assert all(by[tuple(h)]["copying"] > 0.5 for h in planted["induction"])  # they copy what they attend to


def test_the_predecessor_model_has_previous_token_heads_before_its_duplicate_token_heads():
    planted = json.loads((zoo_model_dir("predecessor-llama") / "zoo.json").read_text())["planted"]
    assert planted["previous_token"] and all(l == 0 for l, _ in planted["previous_token"])
    assert planted["duplicate_token"] and all(l == 1 for l, _ in planted["duplicate_token"])
    assert not planted["induction"]


def test_the_lookback_model_has_previous_token_heads_before_the_heads_that_look_back_from_the_filler():
    record = json.loads((zoo_model_dir("lookback-llama") / "zoo.json").read_text())
    planted = record["planted"]  # duplicate_token: from the filler after a query to the query's earlier occurrence
    assert planted["previous_token"] and all(l == 0 for l, _ in planted["previous_token"])
    assert planted["duplicate_token"] and all(l == 1 for l, _ in planted["duplicate_token"])
    assert not planted["induction"]


def test_predecessor_batches_ask_for_an_earlier_token():
    from tlgeo.train.data import SEP
    from tlgeo.train.zoo import predecessor_batch

    tokens, earlier = predecessor_batch(5, 6, seed=2)
    assert tokens.shape == (5, 8) and (tokens[:, 6] == SEP).all()
    assert all(t[j] == t[-1] and 1 <= j < 6 and len(set(t[:6].tolist())) == 6 for t, j in zip(tokens, earlier.tolist()))


def test_lookback_batches_end_in_the_filler_after_a_query():
    from tlgeo.train.data import FILL, SEP
    from tlgeo.train.zoo import lookback_batch

    tokens, earlier = lookback_batch(5, 6, seed=2)
    assert tokens.shape == (5, 9) and (tokens[:, 6] == SEP).all() and (tokens[:, -1] == FILL).all()
    assert all(t[j] == t[-2] and 1 <= j < 6 and len(set(t[:6].tolist())) == 6 for t, j in zip(tokens, earlier.tolist()))
    assert (tokens[:, :6] < FILL).all()


def test_repeated_batches_repeat_and_take_a_bos():
    t = repeated_batch(3, 5, seed=1, bos=256)
    assert t.shape == (3, 11) and (t[:, 0] == 256).all() and (t[:, 1:6] == t[:, 6:]).all()
    assert (t[:, 1:] < 256).all()


def test_an_unknown_or_missing_zoo_model_is_named(tmp_path):
    with pytest.raises(ValueError, match="unknown zoo model 'nope'"):
        zoo_model_dir("nope")
    with pytest.raises(FileNotFoundError, match="scripts/train_zoo.py induction-gpt"):
        zoo_model_dir("induction-gpt", tmp_path)
