"""Circuit discovery where the answer is known: the zoo's 2-block models (``zoo/*/zoo.json`` names their planted
heads). The planted edges are the previous-token heads' writes into the induction heads' keys (K-composition),
in the predecessor model into the duplicate-token heads' values (V-composition), and in the lookback model into the
block-1 heads' queries (Q-composition) and values (V-composition) of the heads that attend from the filler to the
query's earlier occurrence (zoo.json's ``duplicate_token`` heads there). Precision and recall are taken
over the circuit's head -> head edges (the kind the planted edges are) at the smallest k whose circuit recovers 80 %
of the clean - corrupted gap; EAP-IG, 5 steps, 32 prompts, noising (one edge at a time reads the corrupted run)."""

import json

import pytest
import torch

from tlgeo.circuits.analysis import run
from tlgeo.circuits.config import CircuitConfig
from tlgeo.circuits.edges import exact_scores
from tlgeo.circuits.graph import graph_of
from tlgeo.models import load_model
from tlgeo.patching.paths import path_runs, path_sweep
from tlgeo.patching.tasks import build_task
from tlgeo.train.zoo import zoo_model_dir

CASES = {
    "induction-llama": ("induction", ("k",)),
    "predecessor-llama": ("predecessor", ("v",)),
    "induction-gpt": ("induction", ("k",)),
    "lookback-llama": ("lookback", ("q", "v")),
}


def planted_edges(name: str) -> set[tuple[str, str]]:
    planted = json.loads((zoo_model_dir(name) / "zoo.json").read_text())["planted"]
    task, inputs = CASES[name]
    receivers = planted["induction"] if task == "induction" else planted["duplicate_token"]
    return {
        (f"L{sl}H{sh}", f"L{rl}H{rh}.{inp}")
        for sl, sh in planted["previous_token"]
        for rl, rh in receivers
        for inp in inputs
    }


@pytest.fixture(scope="module", params=list(CASES))
def found(request, tmp_path_factory):
    name = request.param
    model = load_model(str(zoo_model_dir(name)))
    cfg = CircuitConfig(tasks=(CASES[name][0],), prompts=32, method="eap-ig", ig_steps=5, verify=10, levels=(0.8,))
    res = run(model, cfg)
    k80 = int(res.summary["k80"].iloc[0])
    circuit = res.edges[res.edges["rank"] <= k80]
    hh = circuit[(circuit["sender_kind"] == "head") & circuit["receiver_input"].isin(["q", "k", "v"])]
    got = set(zip(hh["sender"], hh["receiver"]))
    planted = planted_edges(name)
    return name, res, k80, got, planted, circuit


def test_planted_edges_are_the_circuit(found):
    """induction-llama: the circuit's head -> head edges are exactly the planted K-composition edges (precision 1,
    recall 1). predecessor-llama: every head -> head edge of the circuit is a planted V-composition edge (precision
    1, recall 4 of 6 at k = 10 of 110 edges); the planted edges are the top 6 head -> head edges by |score|.
    induction-gpt (LayerNorm, learned positions): its curve rises slowly (80 % at k = 45 of 110 edges), and the
    circuit there holds 4 of the 6 planted key edges (recall 0.67; L0H0 -> L1H1.k and L1H2.k missed) among 12 head
    -> head edges (precision 0.33): the previous-token heads' values into block 1 and the inputs of L1H3, a head
    zoo.json does not name, come in with them. The method finds the K-composition, not it alone.
    lookback-llama (80 % at k = 39 of 110 edges): the circuit holds the 6 planted value edges (L0H0-1 -> L1H0, 2, 3),
    the top 6 head -> head edges, and none of the 6 planted query edges (recall 0.5; precision 0.6, with 3 key edges
    into L1H3 and one into L1H2): the previous-token heads reach the block-1 queries through block 0's MLP (L0H0-1 ->
    L0MLP -> L1H2-3.q are in the circuit), which a head -> head count does not credit. Path patching with the MLPs in
    the path ranks the planted query paths first (tests/patching/test_known_circuits.py)."""
    name, res, k80, got, planted, circuit = found
    s = res.summary.iloc[0]
    assert s["gap"] > 3 and 0 < k80 < s["edges"]
    precision = len(got & planted) / max(1, len(got))
    recall = len(got & planted) / len(planted)
    hh = res.edges[(res.edges["sender_kind"] == "head") & res.edges["receiver_input"].isin(["q", "k", "v"])]
    top = set(zip(*hh.nsmallest(len(planted), "rank")[["sender", "receiver"]].T.to_numpy()))
    print(name, "k80", k80, "of", s["edges"], "precision", precision, "recall", recall, sorted(got))
    if name == "induction-llama":
        assert precision == 1 and recall == 1
    elif name == "predecessor-llama":
        assert precision == 1 and recall >= 0.5 and top == planted
    elif name == "lookback-llama":
        values = {e for e in planted if e[1].endswith(".v")}
        assert got & planted == values and precision >= 0.5  # every value edge, no query edge (see the docstring)
        assert set(zip(*hh.nsmallest(len(values), "rank")[["sender", "receiver"]].T.to_numpy())) == values
        edges = set(zip(circuit["sender"], circuit["receiver"]))
        prev = {a for a, _ in planted}
        assert {(h, "L0MLP") for h in prev} <= edges  # the query route: previous-token heads -> MLP 0 -> queries
        assert any(("L0MLP", b.replace(".v", ".q")) in edges for _, b in values)
    else:
        assert recall >= 0.6 and precision < 0.5  # what EAP-IG misses here (see the docstring)


def test_top_edges_agree_with_exact_edge_patching(found):
    name, res, *_ = found
    s = res.summary.iloc[0]
    assert s["verified"] == 10 and s["sign_agreement"] >= 0.8
    assert (res.verify["exact"].abs() > 0).all()


def test_exact_edge_patching_equals_direct_path_patching():
    """Block 0's heads into block 1's q, k, v (no block between): exact edge patching is path patching with the MLPs
    frozen (``through_mlps=False``), a different implementation (tlgeo.patching.paths)."""
    model = load_model(str(zoo_model_dir("induction-llama")))
    task = build_task("induction", model, n=8, seed=0)
    metric = lambda logits, rows: task.subset(rows).score(logits)  # noqa: E731
    g = graph_of(model)
    runs = path_runs(model, task, ["head"], [0], [1], through_mlps=False)
    rows = path_sweep(model, runs, [(0, 2), (0, 1)], [(1, 0), (1, 2)], direction="noise", through_mlps=False)
    clean = float(runs.clean.metric.mean())
    edges = [g.edge_index(f"L0H{r['sender_head']}", f"L1H{r['receiver_head']}.{r['receiver_input']}") for r in rows]
    mine = exact_scores(model, g, task.clean, task.corrupted, edges, metric, clean_metric=clean)
    theirs = torch.tensor([sum(r["patched"]) / len(r["patched"]) - clean for r in rows], dtype=torch.float64)
    assert theirs.abs().max() > 0.1
    assert torch.allclose(mine, theirs, atol=1e-4)
