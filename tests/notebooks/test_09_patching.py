"""notebooks/09_patching.ipynb runs end to end on a tiny model with few prompts."""

from __future__ import annotations

from .test_notebooks import NOTEBOOKS, iter_outputs, run_notebook, stdout

NB = NOTEBOOKS / "09_patching.ipynb"


def test_patching_notebook_tiny(tmp_path):
    nb = run_notebook(NB, {"MODEL": "tiny:llama", "TASK": "induction", "PROMPTS": 4, "MIN_ACCURACY": 0.0,
                           "OUT": str(tmp_path), "THREADS": 1}, shared_kernel=True)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    out = stdout(nb)
    assert "Task('induction', n=4" in out and "Task('bigram_copy', n=8" in out
    assert "effects" in out and "of the gap" in out
    assert "bigram_copy: head L" in out or "bigram_copy not patched: " in out  # your own task, patched beside
    assert "not on this tokenizer: task 'capitals'" in out  # a byte tokenizer splits " Paris"
    assert "path patching from L" in out and "with q < 0.05" in out
    assert "previous-token head L0H2 into the induction heads" in out  # the zoo's known circuit
    assert sum(1 for _ in iter_outputs(nb, "image/png")) >= 4
    assert sum(1 for _ in iter_outputs(nb, "text/html")) >= 3  # tables and the circuitsvis view
    assert (tmp_path / "patching.jsonl").exists()
