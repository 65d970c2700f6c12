"""The ground truth of a compiled tracr program (``zoo/tracr-<program>/tracr.json``, written by
``scripts/compile_tracr.py``): the heads and MLPs it uses and every edge between them, to score a circuit against.

The graph's nodes are ``input`` (the token and position embeddings), heads ``L{layer}H{head}``, MLPs ``MLP{layer}``
and ``output`` (the unembedding). An edge ``(sender, receiver, port)`` says the receiver's ``port`` reads a residual
direction the sender writes, read off the compiled weights (tracr gives every RASP variable its own directions, so
this is exact): ``port`` is ``q``, ``k`` or ``v`` for a head, ``in`` for an MLP, ``out`` for the output. A sender
comes before its receiver (attention before the MLP of the same layer). Components the program does not use have
all-zero weights and appear in no edge. The file's format, field by field:

* ``schema`` (``tlgeo-tracr-ground-truth/1``), ``program``, ``description``, ``rasp_label`` (the output variable),
  ``causal``, ``max_seq_len``, ``vocab``, ``bos``, ``pad``, ``input_encoding`` (token -> id);
* ``output_kind`` (``categorical``: the answer is the argmax of the outputs, ``output_values[i]`` the value of
  output ``i``; ``numerical``: the one output is the value), ``output_labels``, ``residual_labels`` (the residual
  stream's directions, in order: ``variable:value`` or ``variable`` for a numerical one, ``one``, ``tokens:x``,
  ``indices:3``);
* ``nodes``: ``node``, ``kind`` (input, head, mlp, output), ``layer``, ``head``, ``reads`` (port -> directions),
  ``writes`` (directions);
* ``edges``: ``sender``, ``receiver``, ``port``, ``sops`` (the RASP variables carried), ``directions``;
* ``reference``: ``inputs`` (``reference.npz``: ``tokens`` ``[n, max_seq_len + 1]`` padded with -1 and tracr's
  final residual stream ``residual`` ``[n, max_seq_len + 1, d_model]``) and ``decoded`` (tracr's decoded outputs);
* ``tracr``: the compiler's own sizes (layers, heads, key size, MLP width, MLP exactness).
"""

from __future__ import annotations

from ..errors import InputError
import json
from pathlib import Path
from typing import Any

from .errors import UnknownModelError

__all__ = ["program_truth", "truth_edges", "program_heads", "program_mlps", "edge_scores"]


def program_truth(model_or_folder: Any) -> dict:
    """A compiled program's ``tracr.json``, from its folder or a model loaded from one (``load_model(folder)``)."""
    folder = getattr(model_or_folder, "tlgeo_name", model_or_folder)
    path = Path(str(folder)) / "tracr.json"
    if not path.is_file():
        raise UnknownModelError(
            f"{folder}: no tracr.json, so no compiled tracr program (scripts/compile_tracr.py writes one)"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def truth_edges(truth: dict, *, ports: bool = True) -> set[tuple[str, ...]]:
    """The program's edges: ``(sender, receiver, port)``, or ``(sender, receiver)`` with ``ports=False``."""
    return {(e["sender"], e["receiver"], e["port"]) if ports else (e["sender"], e["receiver"]) for e in truth["edges"]}


def program_heads(truth: dict) -> list[tuple[int, int]]:
    """``(layer, head)`` of every head the program uses, in order."""
    return sorted((n["layer"], n["head"]) for n in truth["nodes"] if n["kind"] == "head")


def program_mlps(truth: dict) -> list[int]:
    """The layers whose MLP the program uses."""
    return sorted(n["layer"] for n in truth["nodes"] if n["kind"] == "mlp")


def edge_scores(found, truth: dict, *, ports: bool = True) -> dict:
    """Precision and recall of the edges ``found`` (``(sender, receiver, port)``, or pairs with ``ports=False``)
    against the program's: ``precision``, ``recall`` (``nan`` for nothing found), and the ``missed`` and ``extra``
    edges, sorted."""
    found = {tuple(e) for e in found}
    width = {len(e) for e in found}
    if width - {3 if ports else 2}:
        raise InputError(
            f"edges are {'(sender, receiver, port)' if ports else '(sender, receiver)'} tuples; got "
            f"some of {sorted(width)} items (ports={ports})"
        )
    true = truth_edges(truth, ports=ports)
    hit = found & true
    return {
        "precision": len(hit) / len(found) if found else float("nan"),
        "recall": len(hit) / len(true),
        "missed": sorted(true - found),
        "extra": sorted(found - true),
    }
