"""One token, four geometries: the directional decomposition's parallel ratios, direction vs magnitude's
per-token damage, the prediction-anchored split and the tokenwise fit's error, measured on one token pool
and related (:mod:`.analysis`). It reads the four analyses, so it sits above them."""

from .analysis import ANALYSIS, OWNER, GeometriesResult, relation_summary, relations, run, units, with_q
from .config import ATYPICALITY, CONTROLS, QUANTITIES, GeometriesConfig

__all__ = [
    "ANALYSIS",
    "OWNER",
    "GeometriesResult",
    "relation_summary",
    "relations",
    "run",
    "units",
    "with_q",
    "ATYPICALITY",
    "CONTROLS",
    "QUANTITIES",
    "GeometriesConfig",
]
