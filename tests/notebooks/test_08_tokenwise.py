"""notebooks/08_tokenwise.ipynb runs end to end on a tiny model with a small pool."""

from __future__ import annotations

import re

from .test_notebooks import NOTEBOOKS, iter_outputs, run_notebook, stdout

NB = NOTEBOOKS / "08_tokenwise.ipynb"


def test_tokenwise_notebook_tiny(tmp_path):
    nb = run_notebook(NB, {"MODEL": "tiny:llama", "TOKENS": 300, "SEQ_LEN": 31, "K": 8, "N_PATCH": 16, "CLASSES": None,
                           "OUT": str(tmp_path), "THREADS": 1, "N_BOOT": 50}, shared_kernel=True)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    out = stdout(nb)
    assert "tiny:llama: 300 tokens x 4 states of width 64" in out
    assert len(re.findall(r"largest median error [0-9.]+ at layer \d", out)) == 6  # one line per class
    assert re.search(r"highest Spearman\(error, KL\): -?[0-9.]+", out)
    errs = [float(x) for x in re.findall(r"\|\| / \|\|J\^T P\|\| = ([0-9.]+)", out)]
    assert len(errs) == 2 and errs[1] < errs[0]
    assert sum(1 for _ in iter_outputs(nb, "image/png")) >= 3
