"""Execute notebooks/02_editing.ipynb on the tiny Llama (fast) with small budgets."""

import math
import re


from .test_notebooks import NOTEBOOKS, iter_outputs, run_notebook, stdout

EDITING = NOTEBOOKS / "02_editing.ipynb"
TINY = {
    "MODEL": "tiny:llama", "N_TOKENS": 128, "CONTEXT": 64, "SWEEP_SITES": ["value_excl_self", "attn"],
    "S_PAR_GRID": [0.0, 1.0], "S_PERP_GRID": [0.0, 1.0], "SEQ_LEN": 32, "N_WINDOWS": 1, "FIG_TOKENS": 12,
}


def check_editing(nb) -> dict[str, float]:
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    out = stdout(nb)
    assert re.search(r"unedited perplexity [0-9.]+ on \d+ tokens", out)
    # the closed form reproduces both value-space edits (logits and z, all layers)
    cf = set(re.findall(r"closed form (\w+): max abs error z \S+, attn_out \S+, logits \S+", out))
    assert cf == {"value_full", "value_excl_self", "attn"}, out
    found = re.findall(r"closed form (value_\w+): max abs error z (\S+), attn_out (\S+), logits (\S+)", out)
    for _, *errs in found:
        assert all(float(e) < 2e-3 for e in errs), found
    assert re.search(r"edited diagonal from -?[0-9.]+ to -?[0-9.]+", out)
    # figures: sweep, audit (matplotlib) + two diagonal maps; one circuitsvis figure
    assert sum(1 for _ in iter_outputs(nb, "image/png")) >= 4
    assert any("h0 after" in h for h in iter_outputs(nb, "text/html"))
    audit = {s: (float(p), float(e), float(r)) for s, p, e, r in re.findall(
        r"audit (\w+): perturbation ([0-9.]+)% energy ([0-9.]+)% retained ([0-9.]+)%", out)}
    assert set(audit) == {"attn", "value_excl_self", "value_full"}, out
    assert all(math.isfinite(v) for t in audit.values() for v in t)
    return audit


def test_editing_notebook_tiny():
    nb = run_notebook(EDITING, TINY, shared_kernel=True)
    check_editing(nb)
    assert "tiny:llama: 3 layers" in stdout(nb)
