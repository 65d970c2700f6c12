"""``tlgeo circuit`` on a tiny model: what it prints and writes, its resume, and bad input before the model loads;
the analysis from Python (units merged, the exact method) and its plan."""

import pandas as pd
import pytest

from tlgeo.cli import main


def test_circuit_command(tmp_path, capsys):
    out = tmp_path / "c"
    argv = [
        "circuit",
        "--model",
        "tiny:llama",
        "--task",
        "induction",
        "--prompts",
        "4",
        "--ig-steps",
        "2",
        "--k",
        "0,5,20",
        "--verify",
        "5",
        "--out",
        str(out),
        "--threads",
        "1",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "induction, eap-ig: 190 edges" in printed and "smallest k reaching 80 %" in printed
    assert "top 5 edges vs exact edge patching: Spearman" in printed and "faithfulness (share of the" in printed
    names = {p.name for p in out.iterdir()}
    assert {
        "circuit_summary.csv",
        "circuit_edges.csv.gz",
        "circuit_faithfulness.csv",
        "circuit_verify.csv",
        "circuit_graph_induction.png",
        "circuit_faithfulness_induction.png",
        "circuits.jsonl",
        "provenance.jsonl",
    } <= names
    edges = pd.read_csv(out / "circuit_edges.csv.gz")
    assert len(edges) == 190 and {
        "sender",
        "receiver",
        "receiver_input",
        "score",
        "score_par",
        "score_perp",
        "score_self",
        "score_nonself",
        "rank",
    } <= set(edges.columns)
    assert set(edges["receiver_input"]) == {"q", "k", "v", "mlp", "logits"}
    curve = pd.read_csv(out / "circuit_faithfulness.csv")
    assert {0, 5, 20, 190} <= set(curve["k"]) and curve.loc[curve["k"] == 190, "recovered"].iloc[0] == pytest.approx(1)
    lines = (out / "circuits.jsonl").read_text().count("\n")
    assert main(argv) == 0  # a rerun reads every stage back from the log
    again = capsys.readouterr()
    assert (out / "circuits.jsonl").read_text().count("\n") == lines and "resumed 4 rows" in again.out + again.err


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--task", "copy"], "tasks: unknown value(s) ['copy']"),
        (["--levels", "1.5"], "levels must be in (0, 1]"),
        (["--prompts", "1"], "prompts must be >= 2"),
    ],
)
def test_bad_flags_fail_before_the_model_loads(flags, message, tmp_path, capsys, monkeypatch):
    import tlgeo.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the model loaded"))
    code = main(["circuit", "--model", "tiny:llama", "--out", str(tmp_path), *flags])
    assert code == 2 and message in capsys.readouterr().err


def test_exact_method_scores_every_edge_exactly(llama):
    """``method="exact"``: each edge's score is its exact edge-patching change (the verified edges' ``exact``), with
    no parts; EAP's scores agree with them in sign on the top edges of this model."""
    from tlgeo.circuits.analysis import run
    from tlgeo.circuits.config import CircuitConfig

    res = run(llama, CircuitConfig(tasks=("induction",), prompts=4, method="exact", k=(0, 10), verify=5, max_rows=256))
    v = res.verify.set_index(["sender", "receiver"])
    assert (v["score"] - v["exact"]).abs().max() < 1e-6
    assert res.edges["score_par"].isna().all() and res.summary["spearman"].iloc[0] == pytest.approx(1.0)


def test_plan_costs_a_circuit_on_smollm2_shape():
    from tlgeo.circuits.analysis import plan
    from tlgeo.circuits.config import CircuitConfig
    from tlgeo.planner import model_shape

    shape = model_shape("smollm2-135m")
    eap, ig = plan(shape, CircuitConfig(method="eap")), plan(shape, CircuitConfig(method="eap-ig", ig_steps=5))
    assert [w.step for w in eap] == ["ioi: eap scores", "ioi: faithfulness curve", "ioi: exact check of the top edges"]
    assert eap[0].note == "70651 edges" and ig[0].tokens > 3 * eap[0].tokens


def test_the_bench_times_eap_in_forwards(capsys, tmp_path):
    from tests.scripts import load_script

    got = load_script("bench_circuits").main(
        ["--model", "tiny:llama", "--task", "induction", "--prompts", "4", "--ig-steps", "2", "--rounds", "1"]
        + ["--out", str(tmp_path)]
    )
    assert set(got) == {"forward", "eap", "eap_ig", "corrupted_run", "clean_forward_backward", "products"}
    assert got["forward"]["forwards"] == 1 and got["forward"]["cpu_forwards"] == 1
    assert got["eap"]["forwards"] > 1 and got["eap"]["cpu_forwards"] > 1 and got["eap_ig"]["cpu_seconds"] > 0
    assert '"method": "eap"' in capsys.readouterr().out
    table = pd.read_csv(tmp_path / "eap_cost.csv")
    assert list(table["method"]) == list(got) and table["commit"].notna().all()
    assert table.set_index("method").loc["eap", "cpu_forwards"] == pytest.approx(got["eap"]["cpu_forwards"])
    assert (tmp_path / "provenance.jsonl").exists()
