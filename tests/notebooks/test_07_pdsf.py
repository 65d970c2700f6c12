"""notebooks/07_pdsf.ipynb runs end to end on a tiny model with few prompts."""

from __future__ import annotations

import re

from .test_notebooks import NOTEBOOKS, iter_outputs, run_notebook, stdout

NB = NOTEBOOKS / "07_pdsf.ipynb"


def test_pdsf_notebook_tiny(tmp_path):
    nb = run_notebook(NB, {"MODEL": "tiny:llama", "GEOM_PER_GROUP": 3, "GEN_PER_GROUP": 1, "NEW_TOKENS": 4,
                           "OUT": str(tmp_path), "THREADS": 1}, shared_kernel=True)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    out = stdout(nb)
    assert "tiny:llama: 42 specA prompts in 14 groups, 4 states of width 64" in out
    assert re.search(r"interface dimension 1 \+ PR_D \+ PR_S: [0-9.]+ to [0-9.]+", out)
    assert len(re.findall(r"immediate divergence \d+ %, mean first divergence", out)) == 5  # one per condition
    assert len(re.findall(r"single pass \w+: KL [0-9.]+ nats", out)) == 7
    assert re.search(r"static share of F: [0-9.]+ to [0-9.]+ over layers", out)
    assert sum(1 for _ in iter_outputs(nb, "image/png")) >= 6
    assert sum(1 for _ in iter_outputs(nb, "text/html")) >= 1  # the colored tokens
