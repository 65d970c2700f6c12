"""Execute notebooks/03_heads.ipynb on a tiny model (fast).

Regenerate its stored SmolLM2 outputs with (reusing a sensitivity log, if any)::

    python -c "from tests.notebooks.test_notebooks import run_notebook; run_notebook('notebooks/03_heads.ipynb', {}, save_to='notebooks/03_heads.ipynb')"
"""

from __future__ import annotations

import math
import re


from .test_notebooks import iter_outputs, printed_perplexities, run_notebook, stdout, NOTEBOOKS

HEADS_NB = NOTEBOOKS / "03_heads.ipynb"
TINY = {"MODEL": "tiny:llama", "N_TEXTS": 4, "SEQ_LEN": 48, "LAYER_STEP": 1, "N_BOOT": 100, "N_PERM": 100,
        "PPL_TOKENS": 256}


def check_heads_notebook(nb) -> dict[str, float]:
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    out = stdout(nb)
    m = re.search(r"(\d+) heads with mean alpha > 0, (\d+) with mean alpha < 0 \(of (\d+)\)", out)
    assert m and int(m[1]) + int(m[2]) <= int(m[3]), out
    assert re.search(r"sensitivity: \d+ conditions", out)
    assert "patched head z == clean z: True" in out
    assert any(True for _ in iter_outputs(nb, "image/png")), "no heatmap figure"
    figures = [h for h in iter_outputs(nb, "text/html") if "circuits-vis-" in h and "AttentionHeads" in h]
    assert len(figures) == 1, f"{len(figures)} circuitsvis attention_heads figures"
    ppl = printed_perplexities(nb)
    assert set(ppl) == {"unedited", "selective", "random", "all heads"}, ppl
    assert all(math.isfinite(v) and v > 1 for v in ppl.values()), ppl
    return ppl


def test_heads_notebook_tiny():
    nb = run_notebook(HEADS_NB, TINY, shared_kernel=True)
    check_heads_notebook(nb)
    assert "tiny:llama: 3 layers" in stdout(nb)
