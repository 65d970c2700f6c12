"""The computational graph that circuit discovery scores: its nodes, its edges, and the model weights they read.

*Senders* write into the residual stream: the input (token and position embeddings, ``blocks.0.hook_resid_pre``),
every attention head (its write ``z^h W_O^h``, no bias) and every MLP (``hook_mlp_out``). *Receivers* read from it:
every head's query, key and value input (separate receivers; under grouped-query attention a key or value receiver
is a key/value head, shared by its group of query heads), every MLP and the logits. An edge ``s -> r`` exists when
``s`` writes before ``r`` reads: a head or MLP of block ``l`` reads what blocks ``< l`` wrote (and an MLP, in a
sequential block, its own block's heads), the logits read everything.

Senders are numbered in residual order (input, block 0's heads, block 0's MLP, block 1's heads, ...), so the
senders an edge can come from are a prefix (:meth:`Graph.prefix`). Receivers are numbered block by block
(``q`` heads, ``k`` kv heads, ``v`` kv heads, the MLP), the logits last.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pandas as pd
import torch
from torch import Tensor

from ..errors import InputError
from ..families import family_of
from ..models import Model, read_weights

__all__ = ["INPUTS", "Graph", "graph_of", "check_graph_support", "norm_module", "qkv_weights"]

INPUTS = ("q", "k", "v", "mlp", "logits")


@dataclass(frozen=True)
class Graph:
    """The nodes of a model with ``n_layers`` blocks of ``n_heads`` query heads and ``n_kv`` key/value heads;
    ``parallel``: attention and MLP read the same block input (GPT-NeoX, GPT-J)."""

    n_layers: int
    n_heads: int
    n_kv: int
    parallel: bool = False

    # --- senders
    @property
    def n_senders(self) -> int:
        return 1 + self.n_layers * (self.n_heads + 1)

    def head_sender(self, layer: int, head: int) -> int:
        return 1 + layer * (self.n_heads + 1) + head

    def mlp_sender(self, layer: int) -> int:
        return 1 + layer * (self.n_heads + 1) + self.n_heads

    @cached_property
    def senders(self) -> pd.DataFrame:
        """One row per sender, in index order: ``sender`` (``input``, ``L3H2``, ``L3MLP``), ``sender_layer`` (-1 for
        the input), ``sender_head`` (-1 for the input and MLPs), ``sender_kind`` (input, head, mlp)."""
        rows = [("input", -1, -1, "input")]
        for l in range(self.n_layers):
            rows += [(f"L{l}H{h}", l, h, "head") for h in range(self.n_heads)]
            rows.append((f"L{l}MLP", l, -1, "mlp"))
        return pd.DataFrame(rows, columns=["sender", "sender_layer", "sender_head", "sender_kind"])

    # --- receivers
    @property
    def per_block(self) -> int:
        """Receivers per block: ``q`` heads, ``k`` and ``v`` kv heads, the MLP."""
        return self.n_heads + 2 * self.n_kv + 1

    @property
    def n_receivers(self) -> int:
        return self.n_layers * self.per_block + 1

    def block_receivers(self, layer: int) -> slice:
        """The receivers of block ``layer``'s attention (``q``, ``k``, ``v``), in index order."""
        start = layer * self.per_block
        return slice(start, start + self.per_block - 1)

    def mlp_receiver(self, layer: int) -> int:
        return layer * self.per_block + self.per_block - 1

    @property
    def logits_receiver(self) -> int:
        return self.n_layers * self.per_block

    @cached_property
    def receivers(self) -> pd.DataFrame:
        """One row per receiver, in index order: ``receiver`` (``L3H2.q``, ``L3H1.k``, ``L3MLP``, ``logits``),
        ``receiver_layer`` (``n_layers`` for the logits), ``receiver_head`` (a key/value head for ``k`` and ``v``;
        -1 for MLPs and the logits), ``receiver_input`` (q, k, v, mlp, logits)."""
        rows = []
        for l in range(self.n_layers):
            rows += [(f"L{l}H{h}.q", l, h, "q") for h in range(self.n_heads)]
            for inp in ("k", "v"):
                rows += [(f"L{l}H{g}.{inp}", l, g, inp) for g in range(self.n_kv)]
            rows.append((f"L{l}MLP", l, -1, "mlp"))
        rows.append(("logits", self.n_layers, -1, "logits"))
        return pd.DataFrame(rows, columns=["receiver", "receiver_layer", "receiver_head", "receiver_input"])

    def prefix(self, receiver: int) -> int:
        """How many senders (a prefix of the sender order) write before ``receiver`` reads."""
        if receiver == self.logits_receiver:
            return self.n_senders
        layer, pos = divmod(receiver, self.per_block)
        before = 1 + layer * (self.n_heads + 1)
        return before + self.n_heads if pos == self.per_block - 1 and not self.parallel else before

    @cached_property
    def valid(self) -> Tensor:
        """``[n_senders, n_receivers]`` bool: which (sender, receiver) pairs are edges."""
        out = torch.zeros(self.n_senders, self.n_receivers, dtype=torch.bool)
        for r in range(self.n_receivers):
            out[: self.prefix(r), r] = True
        return out

    @property
    def n_edges(self) -> int:
        return int(self.valid.sum())

    def edge_index(self, sender: str, receiver: str) -> tuple[int, int]:
        """``(sender index, receiver index)`` of an edge named as in :attr:`senders` / :attr:`receivers`."""
        s = self.senders.index[self.senders["sender"] == sender]
        r = self.receivers.index[self.receivers["receiver"] == receiver]
        if not len(s) or not len(r):
            raise InputError(
                f"no edge {sender} -> {receiver}: senders are named like input, L0H1, L0MLP; "
                f"receivers like L1H0.q, L1H0.k, L1MLP, logits"
            )
        if not self.valid[s[0], r[0]]:
            raise InputError(f"{sender} does not write before {receiver} reads: no such edge")
        return int(s[0]), int(r[0])


def graph_of(model: Model) -> Graph:
    """The graph of ``model`` (its blocks, heads, key/value heads, parallel blocks)."""
    cfg = model.cfg
    n_kv = getattr(cfg, "n_key_value_heads", None) or cfg.n_heads
    fam = family_of(model)
    parallel = bool(getattr(cfg, "parallel_attn_mlp", False)) or (fam is not None and fam.parallel)
    return Graph(cfg.n_layers, cfg.n_heads, n_kv, parallel)


def norm_module(model: Model, name: str, layer: int | None = None):
    """The model's own norm module (``ln1``, ``ln2`` of block ``layer``, or ``ln_final``): the Hugging Face module
    the bridge wraps, called directly so that no hook point fires."""
    mod = getattr(model, name) if layer is None else getattr(model.blocks[layer], name)
    return getattr(mod, "original_component", mod)


def qkv_weights(model: Model, layer: int, copy: bool = True) -> dict[str, tuple[Tensor, Tensor | None]]:
    """Block ``layer``'s ``W_Q`` ``[head, d_model, d_head]`` (``W_K``, ``W_V``: ``[kv_head, ...]``) and biases, by
    input; detached copies, or views where ``copy`` is False (:func:`~tlgeo.models.read_weights`; ``W_O``:
    :func:`tlgeo.patching.runs.W_O`)."""
    w = read_weights(model.blocks[layer].attn, "W_Q", "b_Q", "W_K", "b_K", "W_V", "b_V", copy=copy)
    return {"q": (w[0], w[1]), "k": (w[2], w[3]), "v": (w[4], w[5])}


def check_graph_support(model: Model) -> None:
    """Raise ``ValueError`` (one line) where the graph's edges are not what the model computes: a norm after
    ``W_O`` or after the MLP (a head's write is then not its own), normalised queries and keys (``hook_q`` is not
    the projection of the normed residual), or no final norm before the unembedding (post-LN)."""
    fam = family_of(model)
    name = fam.name if fam is not None else "this model"
    if fam is not None and not fam.attention:
        raise InputError(f"circuits: {name} has no attention heads: the graph's receivers are heads' q, k, v inputs")
    if getattr(model.cfg, "use_qk_norm", False):
        raise InputError(
            f"circuits: {name} normalises its queries and keys; its q / k receivers are not the "
            "projection of the normed residual, which the graph assumes"
        )
    if getattr(model.cfg, "use_normalization_before_and_after", False) or (fam is not None and fam.post_norms):
        raise InputError(
            f"circuits: {name} normalises each sublayer's output, so a head's write is not its own "
            "term of the residual: its edges are not defined"
        )
    if getattr(model, "ln_final", None) is None or (fam is not None and fam.post_ln):
        raise InputError(
            f"circuits: {name} renormalises the residual after each block (post-LN): a sender's write is "
            "not a term of what later blocks read"
        )
