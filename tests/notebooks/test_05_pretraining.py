"""notebooks/05_pretraining.ipynb runs end to end (tiny model, a few steps)."""

from __future__ import annotations

import re


from .test_notebooks import NOTEBOOKS, run_notebook, stdout

NB = NOTEBOOKS / "05_pretraining.ipynb"


def test_pretraining_notebook_runs(tmp_path):
    nb = run_notebook(NB, {"STEPS": 4, "D_MODEL": 32, "LAYERS": 2, "BATCH": 4, "SEQ_LEN": 16,
                           "EVAL_EVERY": 2, "MAX_DATA_TOKENS": 20000, "OUT": str(tmp_path), "THREADS": 1}, shared_kernel=True)
    text = stdout(nb)
    losses = re.findall(r"(none|value_full): final val loss ([0-9.]+)", text)
    assert [v for v, _ in losses] == ["none", "value_full"]
    assert all(0 < float(x) < 10 for _, x in losses)
    assert "training hooks == analysis edit: True" in text
    assert (tmp_path / "gpt_value_full" / "model" / "config.json").exists()
