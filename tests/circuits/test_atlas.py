"""The circuits step of the atlas: its section in the tiny atlas's report (``atlas_dir``, tests/conftest.py), drawn
from the saved tables, and its headline."""

from __future__ import annotations

import html
import re

import pandas as pd

from tlgeo.circuits.atlas import CircuitBudgets, headline, top_edges


def _section(report: str) -> str:
    """The text of the circuits section: from its heading to the next one."""
    start = re.search(r"<h2>\d+\. Circuit discovery with geometry-resolved edges</h2>", report)
    assert start, "no circuits section in the report"
    end = report.find("<h2>", start.end())
    return report[start.start() : end if end > 0 else len(report)]


def test_the_atlas_report_has_a_circuits_section(atlas_dir):
    report = html.unescape((atlas_dir / "report.html").read_text())
    sec = _section(report)
    assert sec.count("<img") == 2  # the faithfulness curve and the circuit
    assert "induction: the share of the clean - corrupted gap recovered" in sec
    assert "induction: the 10 top edges by |score| with their parts" in sec
    for col in ("k80", "k90", "score_par", "score_perp", "score_self", "part"):
        assert f">{col}<" in sec, col
    command = "tlgeo circuit --model tiny:llama --task induction --prompts 4 --method eap --k 0,5,20 --k-tolerance 0.1"
    assert f"{command} --verify 3 --batch-size 2 --max-rows 16" in sec  # the command that gives the step's tables
    summary = pd.read_csv(atlas_dir / "circuit_summary.csv")
    assert list(summary["task"]) == ["induction"] and list(summary["method"]) == ["eap"]
    curve = pd.read_csv(atlas_dir / "circuit_faithfulness.csv")
    assert {0, 5, 20, int(summary["edges"].iloc[0])} <= set(curve["k"])


def test_headline_and_top_edges_from_the_tables(atlas_dir, tmp_path):
    assert not headline(tmp_path)  # nothing run yet: no sentence
    h = headline(atlas_dir)
    s = pd.read_csv(atlas_dir / "circuit_summary.csv").iloc[0]
    edges = pd.read_csv(atlas_dir / "circuit_edges.csv.gz")
    top = top_edges(edges, 3)
    assert list(top["rank"]) == [1, 2, 3] and set(top["part"]) <= {"par", "perp"}
    assert ((top["score_par"] + top["score_perp"] - top["score"]).abs() < 1e-6 * top["score"].abs().max()).all()
    assert h.sentences == [h.sentences[0]] and f"of {int(s['edges'])} edges recover 80 %" in h.sentences[0]
    assert f"{top['sender'].iloc[0]} -> {top['receiver'].iloc[0]}" in h.sentences[0]
    assert h.warnings == ["Circuits: 4 induction prompts: indication only."]


def test_the_budgets_default_to_eap_on_ioi_in_small_patched_forwards():
    cfg = CircuitBudgets().config()
    assert cfg.method == "eap" and cfg.tasks == ("ioi",) and cfg.verify == 5 and cfg.k_tolerance == 0.1
    assert (cfg.batch_size, cfg.max_rows) == (2, 16)  # the step's peak memory grows with the prompts per forward
