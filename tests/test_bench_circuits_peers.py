"""scripts/bench_circuits_peers.py: tlgeo's edges mapped onto auto-circuit's (both graphs' edge sets, grouped-query
keys and values, the sign), the comparison, the tlgeo side of the bench on the zoo model with no auto-circuit, and where
auto-circuit's environment exists, the two libraries' EAP scores equal on a tiny grouped-query Llama."""

from pathlib import Path

import pytest
import torch

from tests.scripts import load_script
from tlgeo.circuits.graph import Graph

bench = load_script("bench_circuits_peers")

GRAPHS = [Graph(2, 4, 4), Graph(3, 4, 2), Graph(2, 6, 3), Graph(2, 4, 2, parallel=True)]


@pytest.mark.parametrize("g", GRAPHS, ids=lambda g: f"L{g.n_layers}H{g.n_heads}KV{g.n_kv}{'P' if g.parallel else ''}")
def test_every_edge_maps_once_onto_auto_circuits_edges(g):
    """tlgeo's edges (a prefix of senders per receiver) and auto-circuit's (a source of an earlier node layer) are
    the same sets: each auto-circuit edge is part of exactly one tlgeo edge, and a tlgeo kv receiver takes its
    group's query heads."""
    m = bench.peer_edge_map(g)
    assert len(m) == g.n_edges
    used = [e for es in m.values() for e in es]
    assert len(used) == len(set(used)) and set(used) == bench.peer_edges(g)
    assert len(used) == g.n_edges + sum(len(es) - 1 for es in m.values())
    group = g.n_heads // g.n_kv
    s, r = g.edge_index("input", f"L1H{g.n_kv - 1}.k")
    assert m[(s, r)] == [("Resid Start", f"A1.{h}.K") for h in range(g.n_heads - group, g.n_heads)]
    assert m[g.edge_index("L0MLP", "logits")] == [("MLP 0", "Resid End")]
    assert m[g.edge_index("L0H1", "L1H2.q")] == [("A0.1", "A1.2.Q")]


def test_to_tlgeo_negates_and_sums_a_group():
    g = Graph(2, 4, 2)
    gen = torch.Generator().manual_seed(0)
    mine = torch.randn(g.n_senders, g.n_receivers, generator=gen, dtype=torch.float64) * g.valid
    peer = {}
    for (s, r), edges in bench.peer_edge_map(g).items():
        w = torch.rand(len(edges), generator=gen, dtype=torch.float64)
        w = w / w.sum()  # an uneven split of the kv head's score among its query heads
        peer |= {e: -float(mine[s, r] * wi) for e, wi in zip(edges, w)}
    got = bench.to_tlgeo(g, peer)
    c = bench.compare(mine, got, g.valid)
    assert c["rel"] < 1e-12 and c["top20_common"] == 1.0 and c["edges"] == g.n_edges
    s, r = g.edge_index("L0H3", "L1H1.v")
    peer[("A0.3", "A1.2.V")] += 0.5  # auto-circuit's score is -d/d(mask): tlgeo's moves by -0.5
    c = bench.compare(mine, bench.to_tlgeo(g, peer), g.valid)
    assert c["max_abs"] == pytest.approx(0.5) and c["rel"] == pytest.approx(0.5 / float(mine.abs().max()))
    del peer[("A0.3", "A1.2.V")]
    with pytest.raises(KeyError, match="A0.3->A1.2.V"):
        bench.to_tlgeo(g, peer)


def test_tlgeo_side_without_auto_circuit(tmp_path):
    """The zoo case runs and records tlgeo's row when auto-circuit's environment is absent."""
    rows = bench.main(
        [
            "--cases",
            "zoo",
            "--rounds",
            "1",
            "--prompts",
            "4",
            "--peer-python",
            str(tmp_path / "none"),
            "--out",
            str(tmp_path),
        ]
    )
    assert [r["method"] for r in rows] == ["tlgeo"]
    assert rows[0]["edges"] == 110 and rows[0]["forward_equiv"] > 1
    assert (tmp_path / "circuits_peers.csv").read_text().count("\n") == 2
    with pytest.raises(SystemExit):
        bench.main(["--cases", "nope"])


@pytest.mark.skipif(not Path(bench.PEER_PYTHON).exists(), reason=f"no auto-circuit environment at {bench.PEER_PYTHON}")
def test_equal_to_auto_circuit_on_a_tiny_gqa_llama():
    """4 query heads over 2 kv heads: every tlgeo edge equals auto-circuit's (summed over the group) to 1e-5."""
    from tlgeo.models import tiny_model
    from tlgeo.patching.tasks import build_task

    model = tiny_model("llama")
    task = build_task("induction", model, n=4, seed=0)
    got = bench.side_by_side(model, task, rounds=1, threads=1)
    assert got["peer"] is not None, got.get("why")
    assert got["unmatched"] == 0 and got["clean_diff"] < 1e-4
    assert got["cmp"]["scale"] > 1e-3 and got["cmp"]["rel"] < 1e-5
