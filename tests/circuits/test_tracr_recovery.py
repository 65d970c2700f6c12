"""Circuit discovery on the compiled tracr programs (``zoo/tracr-*``), whose every edge is known (``tracr.json``).

Per program: the ``tracr`` task (16 prompts, seed 0), every edge scored by EAP, EAP-IG (5 steps) and exact edge
patching, the smallest k whose circuit recovers 90 % of the clean - corrupted gap (``k90``), and the precision and
recall of that circuit's edges against the program's: over all its edges, and over the edges these prompts can show
(``visible``). Measured (CPU, float32; ``pytest -s`` prints them):

============== ===== ============ === ========= ====== ================
program        edges method       k90 precision recall recall (visible)
============== ===== ============ === ========= ====== ================
frac_prevs        23 each of 3      3 1         0.6    1 (3 of 3)
reverse           77 each of 3      2 1         0.15   1 (2 of 2)
hist               8 eap, eap-ig    7 0.86      1      1 (4 of 4)
hist               8 exact          4 1         0.67   1 (4 of 4)
sort              46 each of 3      7 1         0.54   1 (7 of 7)
detect_pattern   100 each of 3      7 1         0.5    1 (7 of 7)
============== ===== ============ === ========= ====== ================

What no noising method can see (:func:`tlgeo.circuits.truth.visible_edges`; the visible recall is over the rest): an
edge whose sender writes the same on the clean and the corrupted run in the directions its receiver reads (the
constant ``one``, positions, BOS: the corruptions keep the length and the positions), or whose receiver computes the
same on both. Each program's list and reason is :data:`INVISIBLE`; exact patching of each changes the metric by 0,
of each other program edge by more than 0.1.

What the gradient methods miss (EAP, EAP-IG; :data:`FLAT`): in ``hist`` the edges into and upstream of ``MLP0``,
tracr's lookup from the counting head's numerical output to the categorical count, score 0 (exact patching: 0.75
to 2). That MLP is a step function of its input (ReLU pairs of slope ``mlp_exactness``), flat except next to each
step, so its gradient at the clean run (EAP) and at EAP-IG's interpolated inputs is 0. The 90 % circuit is then
reached only with edges tied at score 0, taken in index order (one of them not the program's: precision 6 / 7). In
``sort`` the same holds of ``MLP1`` (the selector width's lookup) and of ``L2H0``'s key (a saturated attention):
those five edges score below 1e-2 (exact: 0.8 to 1.6) and come first at 16 prompts only because their scores, at the
level of rounding (down to 1e-20), are not 0 while every edge outside the program scores exactly 0 (its receiver
reads none of the sender's directions). At 8 prompts one of them is 0 and EAP's k90 is 28 (precision 0.46).
"""

from pathlib import Path

import pytest
import torch

from tlgeo.circuits.analysis import run
from tlgeo.circuits.config import CircuitConfig
from tlgeo.circuits.graph import graph_of
from tlgeo.circuits.truth import recovery, truth_edge, truth_named, truth_receiver, truth_sender, visible_edges
from tlgeo.models import load_model
from tlgeo.models.tracr_truth import program_truth, truth_edges
from tlgeo.patching.tasks import build_task

PROGRAMS = ("frac_prevs", "reverse", "hist", "sort", "detect_pattern")
METHODS = ("eap", "eap-ig", "exact")
N, SEED, LEVEL = 16, 0, 0.9
ZOO = Path(__file__).resolve().parents[2] / "zoo"

# the program's edges these tasks cannot show, and why (the corruption is in tlgeo/patching/tasks/tracr.py)
INVISIBLE = {
    # the head reads positions, `one` and BOS in its query and key: the same on both runs
    "frac_prevs": {("input", "L1H0", "q"), ("input", "L1H0", "k")},
    # only the first token changes, so the length (L0H0 -> MLP0) and opp_index (MLP1, MLP2) are the same on both
    # runs; L0H0's query and key read the tokens, but its selector (Select(tokens, tokens, TRUE)) attends to the
    # same keys whatever they are
    "reverse": {
        ("input", "L0H0", "q"),
        ("input", "L0H0", "k"),
        ("input", "L0H0", "v"),
        ("input", "MLP0", "in"),
        ("L0H0", "MLP0", "in"),
        ("input", "MLP1", "in"),
        ("MLP0", "MLP1", "in"),
        ("MLP1", "MLP2", "in"),
        ("input", "L3H0", "q"),
        ("MLP2", "L3H0", "q"),
        ("input", "L3H0", "k"),
    },
    # the head's value and the MLP's `one` / BOS reads: the same on both runs
    "hist": {("input", "L0H0", "v"), ("input", "MLP0", "in")},
    # `one`, positions and BOS
    "sort": {
        ("input", "L1H0", "q"),
        ("input", "L1H0", "k"),
        ("input", "L1H0", "v"),
        ("input", "MLP1", "in"),
        ("input", "L2H0", "q"),
        ("input", "L2H0", "k"),
    },
    # `one`, positions and BOS; MLP0 -> MLP2 carries "the token is c", which is c at the last position on both runs
    # (the corruption changes the a or the b), and MLP2, the last layer, counts there only
    "detect_pattern": {
        ("input", "L1H0", "q"),
        ("input", "L1H0", "k"),
        ("input", "L1H1", "q"),
        ("input", "L1H1", "k"),
        ("input", "MLP1", "in"),
        ("input", "MLP2", "in"),
        ("MLP0", "MLP2", "in"),
    },
}
# visible edges the gradient methods score ~0 (see the module): program -> (edges, bound on |EAP / EAP-IG score|)
FLAT = {
    "hist": ({("input", "L0H0", "q"), ("input", "L0H0", "k"), ("L0H0", "MLP0", "in")}, 1e-6),
    "sort": (
        {
            ("input", "MLP0", "in"),
            ("MLP0", "L1H0", "q"),
            ("MLP0", "L1H0", "k"),
            ("L1H0", "MLP1", "in"),
            ("MLP1", "L2H0", "k"),
        },
        1e-2,
    ),
}


def _folder(program: str) -> str:
    return str(ZOO / ("tracr-" + program.replace("_", "-")))


@pytest.fixture(scope="module", params=PROGRAMS)
def found(request):
    program = request.param
    model = load_model(_folder(program))
    truth = program_truth(model)
    task = build_task("tracr", model, n=N, seed=SEED)
    visible = visible_edges(model, truth, task.clean, task.corrupted)
    out = {}
    for method in METHODS:
        res = run(
            model,
            CircuitConfig(tasks=("tracr",), prompts=N, seed=SEED, method=method, ig_steps=5, verify=0, levels=(LEVEL,)),
        )
        s = res.summary.iloc[0]
        k = int(s["k90"])
        rec = recovery(res.edges, k, truth, visible)
        named = [truth_edge(a, b) for a, b in zip(res.edges["sender"], res.edges["receiver"])]
        out[method] = dict(
            summary=s,
            rec=rec,
            scores=dict(zip(named, res.edges["score"].astype(float))),
            ranks=dict(zip(named, res.edges["rank"].astype(int))),
        )
        print(
            f"{program:15s} {method:6s} edges {s['edges']:3d} k90 {k:3d} precision {rec['precision']:.3f} "
            f"recall {rec['recall']:.3f} recall_visible {rec['recall_visible']:.3f} extra {rec['extra']}"
        )
    return program, model, truth, visible, out


def test_names_map_onto_the_ground_truth():
    assert truth_sender("input") == "input" and truth_sender("L2MLP") == "MLP2" and truth_sender("L1H3") == "L1H3"
    assert truth_receiver("L1H0.k") == ("L1H0", "k") and truth_receiver("L3MLP") == ("MLP3", "in")
    assert truth_receiver("logits") == ("output", "out")
    assert truth_edge("L0MLP", "L1H1.v") == ("MLP0", "L1H1", "v")
    with pytest.raises(ValueError, match="receivers are named"):
        truth_receiver("L1H0.z")
    with pytest.raises(ValueError, match="senders are named"):
        truth_sender("MLP0")


def test_recovery_counts_the_top_k_and_refuses_bad_input():
    """Precision and recall of a hand-made edge table against a hand-made truth (not the code's own output)."""
    import pandas as pd

    truth = {
        "edges": [
            {"sender": "input", "receiver": "L0H0", "port": "q"},
            {"sender": "L0H0", "receiver": "output", "port": "out"},
        ]
    }
    edges = pd.DataFrame(
        {"sender": ["L0H0", "input", "L0MLP"], "receiver": ["logits", "L0MLP", "L0H0.q"], "rank": [1, 2, 3]}
    )
    visible = pd.DataFrame(
        {"sender": ["input", "L0H0"], "receiver": ["L0H0", "output"], "port": ["q", "out"], "visible": [False, True]}
    )
    got = recovery(edges, 2, truth, visible)
    assert got["precision"] == 0.5 and got["recall"] == 0.5 and got["recall_visible"] == 1
    assert got["missed"] == [("input", "L0H0", "q")] and got["extra"] == [("input", "MLP0", "in")]
    with pytest.raises(ValueError, match="out of range"):
        recovery(edges, 4, truth)


def test_visible_edges_refuses_another_program():
    model = load_model(_folder("hist"))
    task = build_task("tracr", model, n=2, seed=0)
    with pytest.raises(ValueError, match="not the compiled 'reverse'"):
        visible_edges(model, program_truth(_folder("reverse")), task.clean, task.corrupted)
    with pytest.raises(ValueError, match="differ in shape"):
        visible_edges(model, program_truth(model), task.clean, task.corrupted[:, :-1])


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_program_edge_is_a_graph_edge(program):
    """The mapping covers the program: each of its edges is one edge of the model's graph."""
    model = load_model(_folder(program))
    g = graph_of(model)
    names = truth_named(g, zip(*torch.nonzero(g.valid, as_tuple=True)))
    assert len(names) == g.n_edges
    assert truth_edges(program_truth(model)) <= names


def test_invisible_edges_are_the_stated_ones_and_patch_to_nothing(found):
    program, _, truth, visible, out = found
    hidden = {tuple(e) for e in visible.loc[~visible["visible"], ["sender", "receiver", "port"]].to_numpy()}
    assert hidden == INVISIBLE[program]
    exact = out["exact"]["scores"]
    assert all(abs(exact[e]) < 1e-6 for e in hidden)
    assert all(abs(exact[e]) > 0.1 for e in truth_edges(truth) - hidden)  # the rest each move the metric


def test_edges_outside_the_program_score_zero(found):
    """A receiver reads none of the directions a sender outside its edges writes (tracr's weights are 0 there)."""
    _, _, truth, _, out = found
    true = truth_edges(truth)
    for method in METHODS:
        assert max(abs(v) for e, v in out[method]["scores"].items() if e not in true) < 1e-9, method


def test_exact_patching_recovers_every_visible_edge(found):
    program, _, _, _, out = found
    s, rec = out["exact"]["summary"], out["exact"]["rec"]
    assert s["gap"] > 0.3 and 0 < rec["k"] < s["edges"]
    assert rec["precision"] >= 0.9 and rec["recall_visible"] >= 0.9, (program, rec)


@pytest.mark.parametrize("method", ["eap", "eap-ig"])
def test_gradient_methods_recover_the_visible_edges(found, method):
    """Precision and recall (of the visible edges) >= 0.9 at k90, but in hist and sort (:data:`FLAT`): there the
    edges through a step MLP or a saturated attention score about 0 though each moves the metric by more than 0.5
    when patched, the edges the gradient does see rank first, and the 90 % circuit needs the flat edges too, which
    come in by scores at the level of rounding or by ties at 0 in index order (the module's table)."""
    program, _, _, visible, out = found
    got, exact = out[method], out["exact"]["scores"]
    rec = got["rec"]
    if program not in FLAT:
        assert rec["precision"] >= 0.9 and rec["recall_visible"] >= 0.9, (program, method, rec)
        return
    flat, bound = FLAT[program]
    assert all(abs(got["scores"][e]) < bound and abs(exact[e]) > 0.5 for e in flat), (program, method)
    vis = {tuple(e) for e in visible.loc[visible["visible"], ["sender", "receiver", "port"]].to_numpy()}
    sharp = vis - flat
    assert sorted(got["ranks"][e] for e in sharp) == list(range(1, len(sharp) + 1))
    assert rec["k"] >= len(vis)
