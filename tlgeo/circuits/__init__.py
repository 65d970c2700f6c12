"""Circuit discovery with geometry-resolved edges: which edges between a model's components carry a behaviour, how
faithful the circuit they make is, and through which part of the sender's write each edge acts.

* :mod:`.graph`: the nodes (input, every head's q / k / v inputs, every MLP, the logits) and edges.
* :mod:`.eap`: EAP and EAP-IG scores of every edge from one corrupted and one clean forward and one backward, each
  split along / across the receiver's residual and, for heads, into the self message and the rest.
* :mod:`.edges`: runs with edges patched (exact edge patching; a circuit's run with every other edge corrupted).
* :mod:`.circuit`: faithfulness curves, their area, the smallest faithful k, the check against exact patching.
* The contract files: :mod:`.config`, :mod:`.analysis` (``tlgeo circuit``), :mod:`.plots`, :mod:`.cli`.

It reads :mod:`tlgeo.patching`'s tasks, so it sits above the analyses, beside :mod:`tlgeo.geometries`.
"""

from .graph import Graph, graph_of
from .eap import EdgeScores, eap_scores
from .edges import edge_run, exact_scores, faithfulness_runs
from .circuit import curve_area, faithfulness_curve, k_at, ranked_edges
from .config import CircuitConfig
from .analysis import CircuitResult, run

__all__ = [
    "Graph",
    "graph_of",
    "EdgeScores",
    "eap_scores",
    "edge_run",
    "exact_scores",
    "faithfulness_runs",
    "faithfulness_curve",
    "curve_area",
    "k_at",
    "ranked_edges",
    "CircuitConfig",
    "CircuitResult",
    "run",
]
