"""Circuits scored against a compiled tracr program's ground truth (:mod:`tlgeo.models.tracr_truth`).

The graph (:mod:`.graph`) names senders ``input``, ``L1H0``, ``L1MLP`` and receivers ``L1H0.q``, ``L1MLP``,
``logits``; the ground truth names an edge ``(sender, receiver, port)`` with MLPs ``MLP1``, the unembedding
``output`` and ports ``q`` / ``k`` / ``v`` / ``in`` / ``out``. :func:`truth_edge` maps one onto the other.

A noising method (EAP, EAP-IG, exact edge patching) sees an edge only where the sender's write differs between the
clean and the corrupted run *in the directions the receiver reads*, at positions the answer depends on: otherwise
patching the edge changes nothing and its every score is 0. :func:`visible_edges` finds the program's edges that a
task's prompts can show, from the two runs' writes and the directions each receiver reads (``tracr.json``'s
``reads``; tracr's residual basis is ``residual_labels``, one direction per label, and the model has no norm, so a
receiver's read is linear).
"""

from __future__ import annotations

import re
from typing import Iterable

import pandas as pd
import torch
from jaxtyping import Int
from torch import Tensor

from ..errors import InputError
from ..models import Model, input_device
from ..models.tracr_truth import edge_scores, program_heads
from .eap import run_acts
from .graph import Graph, graph_of

__all__ = ["truth_sender", "truth_receiver", "truth_edge", "truth_named", "visible_edges", "recovery"]

_HEAD = re.compile(r"L(\d+)H(\d+)")


def truth_sender(name: str) -> str:
    """The ground truth's name of a graph sender: ``input`` and heads unchanged, ``L2MLP`` -> ``MLP2``."""
    m = re.fullmatch(r"L(\d+)MLP", name)
    if m:
        return f"MLP{m.group(1)}"
    if name == "input" or _HEAD.fullmatch(name):
        return name
    raise InputError(f"unknown graph sender {name!r}: senders are named like input, L0H1, L0MLP")


def truth_receiver(name: str) -> tuple[str, str]:
    """``(receiver, port)`` of a graph receiver: ``L1H0.q`` -> ``(L1H0, q)``, ``L1MLP`` -> ``(MLP1, in)``,
    ``logits`` -> ``(output, out)``."""
    if name == "logits":
        return "output", "out"
    m = re.fullmatch(r"L(\d+)MLP", name)
    if m:
        return f"MLP{m.group(1)}", "in"
    m = re.fullmatch(r"(L\d+H\d+)\.([qkv])", name)
    if m:
        return m.group(1), m.group(2)
    raise InputError(f"unknown graph receiver {name!r}: receivers are named like L1H0.q, L1H0.k, L1MLP, logits")


def truth_edge(sender: str, receiver: str) -> tuple[str, str, str]:
    """``(sender, receiver, port)`` in the ground truth's names of the graph edge ``sender -> receiver``."""
    return (truth_sender(sender), *truth_receiver(receiver))


def truth_named(graph: Graph, edges: Iterable[tuple[int, int]]) -> set[tuple[str, str, str]]:
    """The ground truth's names of graph edges given as ``(sender index, receiver index)``."""
    s, r = graph.senders["sender"], graph.receivers["receiver"]
    return {truth_edge(s[int(i)], r[int(j)]) for i, j in edges}


def _read_rows(truth: dict, node: str, port: str) -> list[int]:
    """The residual directions (indices into ``residual_labels``) that ``node``'s ``port`` reads."""
    labels = {lab: i for i, lab in enumerate(truth["residual_labels"])}
    nodes = {n["node"]: n for n in truth["nodes"]}
    return [labels[d] for d in nodes[node]["reads"].get(port, [])] if node in nodes else []


def _reaches_all(truth: dict, node: str) -> bool:
    """Whether ``node``'s write at every position can reach the last position's answer (a program head reads it
    in a later layer), not only its write at the last position."""
    layer = {n["node"]: n["layer"] for n in truth["nodes"]}.get(node)
    return layer is not None and any(l > layer for l, _ in program_heads(truth))


def visible_edges(
    model: Model,
    truth: dict,
    clean: Int[Tensor, "n pos"],
    corrupted: Int[Tensor, "n pos"],
    *,
    tol: float = 1e-6,
    batch_size: int = 16,
) -> pd.DataFrame:
    """Which of the program's edges a task's clean / corrupted prompts can show. One row per edge of ``truth``:
    ``sender``, ``receiver``, ``port``, ``read_change`` (``max |w_s(corrupted) - w_s(clean)|`` over prompts, the
    directions the receiver's port reads and the positions where they count: every position for a key or value,
    else the last one unless a program head in a later layer reads the receiver's write), ``receiver_change`` (the
    same of the receiver's own write; the logits' for ``output``) and ``visible``: both above ``tol``. An edge
    with no read change no noising method can see (its patch changes nothing the receiver reads); one whose
    receiver computes the same on both runs carries nothing the answer depends on. ``model``: the compiled
    program (its residual ``len(residual_labels)`` wide, no norm)."""
    labels = truth["residual_labels"]
    if model.cfg.d_model != len(labels):
        raise InputError(
            f"the model's residual is {model.cfg.d_model} wide, the program's {len(labels)}: "
            f"not the compiled {truth['program']!r}"
        )
    if clean.shape != corrupted.shape:
        raise InputError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} prompts differ in shape")
    graph = graph_of(model)
    names = list(graph.senders["sender"].map(truth_sender))
    change = torch.zeros(graph.n_senders, 2, len(labels), dtype=torch.float64)  # [sender, (all, last), d]
    out_change = torch.zeros((), dtype=torch.float64)
    for start in range(0, clean.shape[0], batch_size):
        rows = slice(start, min(start + batch_size, clean.shape[0]))
        a = run_acts(model, graph, clean[rows], torch.float64).writes
        b = run_acts(model, graph, corrupted[rows], torch.float64).writes
        d = (b - a).abs().amax(dim=1).cpu()  # [senders, pos, d]
        change = torch.maximum(change, torch.stack([d.amax(dim=1), d[:, -1]], dim=1))
        with torch.no_grad():
            la, lb = model(clean[rows].to(input_device(model))), model(corrupted[rows].to(input_device(model)))
        out_change = torch.maximum(out_change, (lb[:, -1] - la[:, -1]).abs().max().double().cpu())
    rows_out = []
    for e in truth["edges"]:
        s, r, port = e["sender"], e["receiver"], e["port"]
        read = _read_rows(truth, r, port)
        at = 0 if port in ("k", "v") or _reaches_all(truth, r) else 1
        read_change = float(change[names.index(s), at, read].max()) if read else 0.0
        own = (
            float(out_change)
            if r == "output"
            else float(change[names.index(r), 0 if _reaches_all(truth, r) else 1].max())
        )
        rows_out.append(
            dict(
                sender=s,
                receiver=r,
                port=port,
                read_change=read_change,
                receiver_change=own,
                visible=read_change > tol and own > tol,
            )
        )
    return pd.DataFrame(rows_out)


def recovery(edges: pd.DataFrame, k: int, truth: dict, visible: pd.DataFrame | None = None) -> dict:
    """How well the circuit of the ``k`` top edges of ``edges`` (a circuit result's edge table: ``sender``,
    ``receiver``, ``rank``) recovers the program's: ``precision`` and ``recall`` over the program's edges
    (:func:`tlgeo.models.tracr_truth.edge_scores`, with its ``missed`` and ``extra``), and, with ``visible``
    (:func:`visible_edges`), ``recall_visible`` over the edges the prompts can show and the ``missed_visible``."""
    if not 0 <= k <= len(edges):
        raise InputError(f"k {k} out of range: the table has {len(edges)} edges (0..{len(edges)})")
    kept = edges.nsmallest(k, "rank")
    found = {truth_edge(s, r) for s, r in zip(kept["sender"], kept["receiver"])}
    out = {"k": k, **edge_scores(found, truth)}
    if visible is not None:
        vis = {tuple(e) for e in visible.loc[visible["visible"], ["sender", "receiver", "port"]].to_numpy()}
        out["recall_visible"] = len(found & vis) / len(vis) if vis else float("nan")
        out["missed_visible"] = sorted(vis - found)
    return out
