"""Patching on circuits whose answer is known: the zoo's 2-block models (tlgeo.train.zoo), whose attention scores
name their previous-token heads (Llama: L0H2; GPT, LayerNorm: L0H0, L0H1) and induction heads (both: L1H0-2), on
the induction task, noising (the corrupted run's activations patched into the clean run: what breaks the
behaviour)."""

import json

import pytest

from tlgeo.models import load_model
from tlgeo.patching.effects import effect_test
from tlgeo.patching.exact import exact_sweep
from tlgeo.patching.paths import path_effects, path_runs, path_sweep
from tlgeo.patching.runs import task_runs
from tlgeo.patching.tasks import build_task
from tlgeo.train.zoo import zoo_model_dir


@pytest.fixture(scope="module", params=["induction-llama", "induction-gpt"])
def zoo(request):
    d = zoo_model_dir(request.param)
    planted = json.loads((d / "zoo.json").read_text())["planted"]
    model = load_model(str(d))
    task = build_task("induction", model, n=64, seed=0)
    return model, task, [tuple(h) for h in planted["previous_token"]], [tuple(h) for h in planted["induction"]]


def test_exact_patching_ranks_the_planted_heads_first(zoo):
    model, task, prev, induction = zoo
    runs = task_runs(model, task, ["head"])
    assert runs.accuracy()["accuracy"] > 0.5 and runs.gap > 3  # the model does the task (GPT 0.55, Llama 0.83)
    clean, corrupted = runs.clean.metric.numpy(), runs.corrupted.metric.numpy()
    tests = {
        (r["layer"], r["head"]): effect_test(r["patched"], clean, corrupted, "noise")
        for r in exact_sweep(model, runs, ["head"], direction="noise")
    }
    ranked = sorted(tests, key=lambda h: -abs(tests[h]["effect"]))
    planted = set(prev) | set(induction)
    assert set(ranked[: len(planted)]) == planted  # precision@k = 1, k = the planted heads
    assert all(tests[h]["ci_low"] > 0 for h in planted)  # each one's noising breaks the behaviour
    assert max(tests[h]["effect"] for h in prev) > 0.8  # a previous-token head feeds every induction head


def test_path_patching_finds_k_composition(zoo):
    """Previous-token heads -> induction heads: through their keys, not their queries (the query position's previous
    token is the same in both runs), and more through their keys than their values."""
    model, task, prev, induction = zoo
    runs = path_runs(model, task, ["head"], [0], [1])
    df = path_effects(path_sweep(model, runs, prev, induction, direction="noise"), runs, direction="noise")
    for _, h in induction:
        d = df[df["receiver_head"] == h].set_index(["sender_head", "receiver_input"])
        k = d.xs("k", level="receiver_input")
        assert (k["ci_low"] > 0).any() and k["significant"].any()
        assert d.xs("q", level="receiver_input")["effect"].abs().max() < 2e-3
        assert k["effect"].sum() > d.xs("v", level="receiver_input")["effect"].sum()


def test_an_induction_head_acts_through_its_non_self_aggregate_across_the_residual(zoo):
    """``nonself`` carries most of an induction head's effect (Llama: all of it; GPT: ``self`` 0.07-0.12 of
    0.45-0.73) and ``head_perp`` all of it, ``head_par`` none."""
    model, task, _, induction = zoo
    comps = ["head", "self", "nonself", "head_par", "head_perp"]
    runs = task_runs(model, task, comps, [1])
    clean, corrupted = runs.clean.metric.numpy(), runs.corrupted.metric.numpy()
    eff = {
        (r["component"], r["head"]): effect_test(r["patched"], clean, corrupted, "noise")["effect"]
        for r in exact_sweep(model, runs, comps, layers=[1], direction="noise")
    }
    for _, h in induction:
        whole = eff[("head", h)]
        assert eff[("nonself", h)] > 0.7 * whole and abs(eff[("self", h)]) < 0.3 * whole
        assert eff[("head_perp", h)] == pytest.approx(whole, abs=0.02)
        assert abs(eff[("head_par", h)]) < 0.02


def test_path_patching_finds_v_composition_in_the_predecessor_model():
    """The zoo's predecessor Llama answers ``r1..rL SEP rj`` with ``r(j-1)``: its duplicate-token heads attend from
    the query to the earlier ``rj`` and read what the previous-token heads wrote there through their values. Exact
    patching ranks those heads first; path patching puts the previous-token heads' effect into the duplicate-token
    heads' values, not their keys or queries (induction's mirror image)."""
    d = zoo_model_dir("predecessor-llama")
    planted = json.loads((d / "zoo.json").read_text())["planted"]
    prev, dup = [tuple(h) for h in planted["previous_token"]], [tuple(h) for h in planted["duplicate_token"]]
    assert prev and dup and all(l == 0 for l, _ in prev) and all(l == 1 for l, _ in dup)
    model = load_model(str(d))
    task = build_task("predecessor", model, n=64, seed=0)
    runs = task_runs(model, task, ["head"])
    assert runs.accuracy()["accuracy"] > 0.5 and runs.gap > 3
    clean, corrupted = runs.clean.metric.numpy(), runs.corrupted.metric.numpy()
    tests = {
        (r["layer"], r["head"]): effect_test(r["patched"], clean, corrupted, "noise")
        for r in exact_sweep(model, runs, ["head"], direction="noise")
    }
    ranked = sorted(tests, key=lambda h: -abs(tests[h]["effect"]))
    assert set(ranked[: len(prev) + len(dup)]) == set(prev) | set(dup)
    pruns = path_runs(model, task, ["head"], [0], [1])
    df = path_effects(path_sweep(model, pruns, prev, dup, direction="noise"), pruns, direction="noise")
    by = df.groupby("receiver_input")["effect"].sum()
    assert by["v"] > 5 * abs(by["k"]) and abs(by["q"]) < 1e-3
    v = df[df["receiver_input"] == "v"]
    assert v["significant"].any() and (v["ci_low"] > 0).any()


def test_path_patching_finds_q_composition_in_the_lookback_model():
    """The zoo's lookback Llama answers ``r1..rL SEP rj FILL`` with ``r(j-1)``: at the filler a block-1 head queries
    with ``rj``, which a previous-token head wrote there, for the earlier ``rj`` and reads ``r(j-1)``, which a
    previous-token head wrote there. Among every block-0 head's path into every block-1 head's query, the planted
    pair's (previous-token head -> the head that attends from the filler to the earlier ``rj``) is first, and the
    previous-token heads act on the planted heads through their queries and values, not their keys. Their query
    paths run through block 0's MLP: with the MLPs frozen (``through_mlps=False``) almost nothing is left of them."""
    d = zoo_model_dir("lookback-llama")
    planted = json.loads((d / "zoo.json").read_text())["planted"]
    prev, look = [tuple(h) for h in planted["previous_token"]], [tuple(h) for h in planted["duplicate_token"]]
    assert prev and look and all(l == 0 for l, _ in prev) and all(l == 1 for l, _ in look)
    model = load_model(str(d))
    task = build_task("lookback", model, n=32, seed=0)
    runs = path_runs(model, task, ["head"], [0], [1])
    assert runs.accuracy()["accuracy"] > 0.5 and runs.gap > 3
    heads = range(model.cfg.n_heads)
    rows = path_sweep(model, runs, [(0, h) for h in heads], [(1, h) for h in heads], direction="noise")
    df = path_effects(rows, runs, direction="noise")
    q = df[df["receiver_input"] == "q"].sort_values("effect", key=abs, ascending=False)
    top = q.iloc[0]
    assert (0, top["sender_head"]) in prev and (1, top["receiver_head"]) in look
    assert top["significant"] and top["ci_low"] > 0
    pairs = {(s, r) for _, s in prev for _, r in look}
    first = list(zip(q["sender_head"], q["receiver_head"]))[: len(pairs)]
    assert set(first) == pairs  # the planted pairs' q paths come first
    mine = df[df["sender_head"].isin([h for _, h in prev]) & df["receiver_head"].isin([h for _, h in look])]
    by = mine.groupby("receiver_input")["effect"].sum()
    print(q.head(6)[["sender_head", "receiver_head", "effect"]], by, sep="\n")
    assert by["q"] > 2 * abs(by["k"]) and by["v"] > 2 * abs(by["k"])
    direct = path_runs(model, task, ["head"], [0], [1], through_mlps=False)
    rows = path_sweep(model, direct, prev, look, direction="noise", inputs=["q"], through_mlps=False)
    assert path_effects(rows, direct, direction="noise")["effect"].sum() < 0.1 * by["q"]
