"""Execute the notebooks on the embedded SmolLM2 at their defaults and save them with their outputs.

    .venv/bin/python scripts/execute_notebooks.py                 # all of notebooks/*.ipynb
    .venv/bin/python scripts/execute_notebooks.py 01 07           # those whose names start so

Each runs top to bottom in a fresh kernel of this interpreter (the test suite's runner,
``tests/notebooks/test_notebooks.run_notebook``), is saved in place with its outputs (injected
cells removed, circuitsvis figures over 1 MB loading their bundle from the CDN), and its wall
time is printed; the quickstart's outputs are checked as the tests check them. The test suite
executes the same notebooks on tiny random models.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.notebooks.test_notebooks import NOTEBOOKS, check_quickstart, run_notebook, stdout  # noqa: E402


def check_quickstart_smollm2(nb) -> None:
    """What the quickstart must show on SmolLM2: perpendicular removal far more damaging than parallel."""
    ppl = check_quickstart(nb)
    assert "smollm2-135m: 30 layers" in stdout(nb)
    assert 5 < ppl["unedited"] < 100, ppl
    assert ppl["unedited"] < ppl["value_excl_self, s_par=0"] < ppl["attn, s_perp=0"], ppl
    assert ppl["attn, s_perp=0"] > 10 * ppl["unedited"], ppl


CHECKS = {"01_quickstart": check_quickstart_smollm2}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="notebook name prefixes (default: all)")
    ap.add_argument("--no-save", action="store_true", help="execute and check only")
    a = ap.parse_args(argv)
    paths = sorted(NOTEBOOKS.glob("*.ipynb"))
    if a.names:
        paths = [p for p in paths if any(p.stem.startswith(n) for n in a.names)]
        if not paths:
            ap.error(f"no notebook starts with {a.names}")
    for path in paths:
        t0 = time.perf_counter()
        nb = run_notebook(path, {}, save_to=None if a.no_save else path)
        if path.stem in CHECKS:
            CHECKS[path.stem](nb)
        print(f"{path.name}: {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
