"""Draw the README's figure from a committed table: the median parallel ratio per layer and site.

    python scripts/readme_figure.py [results/run-smollm2-135m/profile_summary.csv] [docs/profile.png]

The table is `tlgeo decompose`'s ``profile_summary.csv`` (its folder's provenance.jsonl says how it was
made); the figure is :func:`tlgeo.decomposition.plots.plot_profile`, as in the atlas.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    table = Path(argv[0]) if argv else ROOT / "results/run-smollm2-135m/profile_summary.csv"
    out = Path(argv[1]) if len(argv) > 1 else ROOT / "docs/profile.png"
    from tlgeo.decomposition.plots import plot_profile

    fig = plot_profile(pd.read_csv(table))
    fig.savefig(out, dpi=110, bbox_inches="tight")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
