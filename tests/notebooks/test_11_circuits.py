"""notebooks/11_circuits.ipynb runs end to end on the zoo's induction model with few prompts, and shows the planted
K-composition edges among the top edges."""

from __future__ import annotations

import re

from .test_notebooks import NOTEBOOKS, iter_outputs, run_notebook, stdout

NB = NOTEBOOKS / "11_circuits.ipynb"


def test_circuits_notebook_tiny(tmp_path):
    nb = run_notebook(NB, {"PROMPTS": 8, "IG_STEPS": 2, "VERIFY": 3, "OUT": str(tmp_path), "THREADS": 1},
                      shared_kernel=True)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    out = stdout(nb)
    assert "induction-llama: 2 blocks x 4 heads" in out
    assert "eap: planted L0H2 -> L1H2.k: rank " in out and "eap-ig: planted L0H2 -> L1H0.k: rank " in out
    best = {m: int(r) for m, r in re.findall(r"(eap|eap-ig): best-ranked planted edge: rank (\d+)", out)}
    assert set(best) == {"eap", "eap-ig"} and max(best.values()) <= 5, best  # a planted edge among the top 5 of 110
    assert re.search(r"eap-ig: \d+ of 110 edges recover 80 % of the gap", out)
    assert sum(1 for _ in iter_outputs(nb, "image/png")) >= 2  # the faithfulness curves and the circuit
    assert sum(1 for _ in iter_outputs(nb, "text/html")) >= 2  # the summary and the top edges
    assert (tmp_path / "circuit_summary.csv").exists() and (tmp_path / "circuit_edges.csv.gz").exists()
