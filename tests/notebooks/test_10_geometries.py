"""notebooks/10_geometries.ipynb runs end to end on a tiny model with a small pool."""

from __future__ import annotations

from .test_notebooks import NOTEBOOKS, iter_outputs, run_notebook, stdout

NB = NOTEBOOKS / "10_geometries.ipynb"


def test_geometries_notebook_tiny(tmp_path):
    nb = run_notebook(NB, {"MODEL": "tiny:llama", "TOKENS": 60, "LAYER_COUNT": 2, "SEQ_LEN": 16, "K": 8, "OUT": str(tmp_path),
                           "THREADS": 1}, shared_kernel=True)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    out = stdout(nb)
    assert "tiny:llama: blocks [1, 2]" in out and "tokens x 2 blocks" in out
    assert "logit-lens rank at the last block: [0]" in out
    assert sum(1 for _ in iter_outputs(nb, "image/png")) >= 2
    assert sum(1 for _ in iter_outputs(nb, "text/html")) >= 3  # tables and the circuitsvis views
    assert (tmp_path / "geometries_relations.csv").exists()
