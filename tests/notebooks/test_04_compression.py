"""Notebook 04 (compression diagnosis) executes on toy compressed models."""

from .test_notebooks import NOTEBOOKS, iter_outputs, run_notebook, stdout


def test_notebook_04_tiny():
    nb = run_notebook(NOTEBOOKS / "04_compression.ipynb", {"TOY": True, "N_PROMPTS": 3, "SEQ_LEN": 32, "PPL_TOKENS": 256},
                      shared_kernel=True)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    out = stdout(nb)
    assert "compressed models: ['half_mlp', 'zero_rows']" in out
    assert "ppl base:" in out and "ppl zero_rows:" in out
    assert "local, mlp, last token:" in out and "e2e, block, last token:" in out
    assert sum(1 for _ in iter_outputs(nb, "image/png")) == 2
