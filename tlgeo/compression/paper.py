"""The compression paper's reference numbers (Table 12), in one place: the command line reads them.

Only what the package compares against is here; the measured numbers are in ``results/`` and
RESULTS.md."""

from __future__ import annotations

__all__ = ["PAPER_R_E_PERP", "PAPER_ORDER", "paper_line"]

# Table 12: across layers, Pearson r(e, e_perp) of the per-layer means is at least this
PAPER_R_E_PERP = 0.97
# methods from the smallest to the largest perpendicular error (AWQ < unstructured < 4:8 < 2:4)
PAPER_ORDER = ("awq", "wanda", "wanda_4_8", "wanda_2_4")


def paper_line() -> str:
    """One line of what the paper reports, for the top of the diagnosis table."""
    return f"paper (Table 12): r(e, e_perp) >= {PAPER_R_E_PERP} across layers; e_perp orders the methods " + " < ".join(
        PAPER_ORDER
    )
