"""notebooks/06_direction_magnitude.ipynb runs end to end on a tiny model with small budgets."""

from __future__ import annotations

import re

from .test_notebooks import NOTEBOOKS, iter_outputs, run_notebook, stdout

NB = NOTEBOOKS / "06_direction_magnitude.ipynb"
TINY = {"MODEL": "tiny:llama", "SENTENCES": 4, "SEEDS": 2, "DELTAS": [0.05, 0.5], "BLIMP_PAIRS": 2,
        "REPAIR_SENTENCES": 3, "REPAIR_DELTAS": [0.5], "PROBE_SENTENCES": 8, "PROBE_LAYERS": [0, 2], "THREADS": 1}


def test_direction_magnitude_notebook_tiny():
    nb = run_notebook(NB, TINY, shared_kernel=True)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    out = stdout(nb)
    assert "tiny:llama: 3 blocks; perturbing blocks 1..1; 4 sentences" in out
    # exact mode: every token moves by delta; the angle keeps each norm, the magnitude changes it by delta
    moves = {k: [float(x) for x in v] for k, *v in re.findall(
        r"(magnitude|angle): displacement ([0-9.]+)\.\.([0-9.]+) \(delta ([0-9.]+)\), "
        r"\|change of norm\| ([0-9.]+)\.\.([0-9.]+); clipped (\d+)", out)}
    assert set(moves) == {"magnitude", "angle"}, out
    for kind, (lo, hi, delta, nlo, nhi, clipped) in moves.items():
        assert delta > 0 and clipped == 0
        assert abs(lo - delta) < 1e-3 * delta and abs(hi - delta) < 1e-3 * delta
    assert moves["angle"][4] < 1e-3 * moves["angle"][2]
    assert abs(moves["magnitude"][3] - moves["magnitude"][2]) < 1e-3 * moves["magnitude"][2]
    assert re.search(r"clean accuracy [0-9.]+% on 12 pairs", out)
    assert re.search(r"best UPOS accuracy: direction [0-9.]+%, magnitude [0-9.]+%, majority [0-9.]+%", out)
    assert re.search(r"clean entropy [0-9.]+", out)
    assert sum(1 for _ in iter_outputs(nb, "image/png")) >= 4  # damage, BLiMP, repair, probes
    assert sum("ColoredTokens" in h for h in iter_outputs(nb, "text/html")) == 2
