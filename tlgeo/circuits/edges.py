"""Runs with edges patched: each receiver reads its own residual, in which chosen senders' writes come from the
other run (edge-level patching, as ACDC and path patching do it, every edge at once).

In a run on the clean prompts, receiver ``r`` reads ``x_r = base_r + scale * sum_{s in E(r)} sign (w_s(other) -
w_s(this))`` with, per mode,

* ``ablate``: ``base_r`` this run's residual, ``E(r)`` the edges patched, the other run the corrupted one: the edges
  of ``E`` read the corrupted sender, every other edge the run's own (exact edge patching, one edge or a few);
* ``keep``: ``base_r`` the corrupted run's residual at ``r``, ``E(r)`` the circuit's edges into ``r``, whose senders
  are this run's own: every edge outside the circuit reads the corrupted sender (a circuit's faithfulness run).

Both are the same run (the residual is the sum of the senders' writes and constant biases); the form chosen keeps the
sum over the few edges named. ``sets``: one ``[senders, receivers]`` bool mask per group of rows, each group one copy
of the prompts. A head's q / k / v receiver reads ``norm(x_r) W + b`` (the block's own norm module), an MLP
``x_r`` at its norm's input, the logits ``x_r`` at the final norm's input.
"""

from __future__ import annotations

from typing import Sequence

import torch
from jaxtyping import Int
from torch import Tensor

from ..errors import InputError
from ..geometry.patch_parts import head_writes
from ..hooks.resume import in_model_dtype
from ..models import Model
from ..patching.runs import W_O
from .eap import RESID0, Metric, RunActs, _last_logits, run_acts
from .graph import Graph, norm_module, qkv_weights

__all__ = ["MODES", "edge_run", "edge_metric", "exact_scores", "faithfulness_runs"]

MODES = ("ablate", "keep")


def _rows(t: Tensor, groups: int) -> Tensor:
    """``[groups * n, ...]`` of ``[n, ...]``: one copy per group."""
    return t.repeat(groups, *([1] * (t.ndim - 1)))


class _EdgeHooks:
    """The hooks of one edge-patched run (see the module): each used sender's write kept as the run makes it
    (``cur``: sender -> ``[R * n, pos, d]``), each receiver's input rebuilt from the writes its edges patch.
    ``masks``: ``[R, senders, receivers]``, already restricted to the graph's valid edges."""

    def __init__(
        self, model: Model, graph: Graph, corr: RunActs, masks: Tensor, n: int, *, mode: str, scale: float
    ) -> None:
        self.model, self.graph, self.corr, self.masks = model, graph, corr, masks
        self.R, self.n, self.mode, self.scale = masks.shape[0], n, mode, scale
        self.used = masks.any(0).any(1)  # the senders some edge names: only their writes are kept
        self.dt = corr.writes.dtype
        self.cur: dict[int, Tensor] = {}  # sender -> this run's write [R * n, pos, d]
        self.state: dict[str, Tensor] = {}
        self.sign = 1.0 if mode == "ablate" else -1.0

    def residual(self, first: int, count: int, here: Tensor, other: Tensor) -> Tensor:
        """``[R, count, n, pos, d]``: the residual of receivers ``first..first+count`` (``here``: this run's
        ``[R * n, pos, d]``; ``other``: the corrupted run's ``[n, pos, d]``)."""
        R, n, dt, cur = self.R, self.n, self.dt, self.cur
        base = here.to(dt).reshape(R, 1, n, *here.shape[1:]) if self.mode == "ablate" else other[None, None]
        pre = self.graph.prefix(first)
        m = self.masks[:, :pre, first : first + count]  # [R, pre, count]
        senders = [s for s in range(pre) if self.used[s] and m[:, s].any()]
        x = base.expand(R, count, *base.shape[2:]).clone()
        for s in senders:
            diff = self.corr.writes[s][None] - cur[s].reshape(R, n, *cur[s].shape[1:])  # [R, n, pos, d]
            x += (self.sign * self.scale) * m[:, s].to(dt)[:, :, None, None, None] * diff[:, None]
        return x

    def keep_writes(self, first_sender: int, writes: Tensor) -> None:
        """Keep the writes ``[k, R * n, pos, d]`` of senders ``first_sender..`` that some edge names."""
        for i in range(writes.shape[0]):
            if self.used[first_sender + i]:
                self.cur[first_sender + i] = writes[i].to(self.dt)

    def on_resid0(self, x: Tensor, hook) -> None:
        """Keep the embedding's write."""
        self.keep_writes(0, x[None])

    def on_ln1(self, layer: int):
        """The hook that computes each head's own q, k and v input of ``layer`` from its rebuilt residual."""

        def fn(x: Tensor, hook) -> None:
            graph, R, n = self.graph, self.R, self.n
            first = graph.block_receivers(layer).start
            count = graph.per_block - 1
            xr = self.residual(first, count, x, self.corr.attn_in[layer])  # [R, count, n, pos, d]
            norm = norm_module(self.model, "ln1", layer)
            y = norm(in_model_dtype(self.model, xr.permute(0, 2, 3, 1, 4)))  # [R, n, pos, count, d]
            w, H, K = qkv_weights(self.model, layer, copy=False), graph.n_heads, graph.n_kv  # read in place
            for inp, sl in (("q", slice(0, H)), ("k", slice(H, H + K)), ("v", slice(H + K, H + 2 * K))):
                W, b = w[inp]
                got = torch.einsum("rnphd,hde->rnphe", y[:, :, :, sl], W.to(y.device, y.dtype))
                if b is not None:
                    got = got + b.to(y.device, y.dtype)
                self.state[f"{layer}.{inp}"] = got.reshape(R * n, *got.shape[2:])

        return fn

    def on_qkv(self, layer: int, inp: str):
        """The hook that replaces ``layer``'s q, k or v by the one :meth:`on_ln1` computed."""

        def fn(x: Tensor, hook) -> Tensor:
            return self.state.pop(f"{layer}.{inp}").to(x.dtype)

        return fn

    def on_z(self, layer: int):
        """The hook that keeps the heads' writes of ``layer``."""

        def fn(z: Tensor, hook) -> None:
            w_o = W_O(self.model, layer, copy=False).to(z.device)
            self.keep_writes(self.graph.head_sender(layer, 0), head_writes(z, w_o).permute(2, 0, 1, 3))

        return fn

    def on_mlp_out(self, layer: int):
        """The hook that keeps the MLP's write of ``layer``."""

        def fn(x: Tensor, hook) -> None:
            self.keep_writes(self.graph.mlp_sender(layer), x[None])

        return fn

    def on_in(self, first: int, other: Tensor):
        """The hook that replaces a one-receiver input (an MLP's, the logits') by its rebuilt residual."""

        def fn(x: Tensor, hook) -> Tensor:
            return self.residual(first, 1, x, other)[:, 0].reshape(x.shape).to(x.dtype)

        return fn

    def hooks(self, final: dict[str, Tensor]) -> list[tuple]:
        """Every hook of the run; the final norm's rebuilt input is left in ``final``."""
        graph, corr = self.graph, self.corr
        hooks = [(RESID0, self.on_resid0)]
        for l in range(graph.n_layers):
            hooks += [
                (f"blocks.{l}.ln1.hook_in", self.on_ln1(l)),
                *[(f"blocks.{l}.attn.hook_{i}", self.on_qkv(l, i)) for i in "qkv"],
                (f"blocks.{l}.attn.hook_z", self.on_z(l)),
                (f"blocks.{l}.ln2.hook_in", self.on_in(graph.mlp_receiver(l), corr.mlp_in[l])),
                (f"blocks.{l}.hook_mlp_out", self.on_mlp_out(l)),
            ]
        to_logits = self.on_in(graph.logits_receiver, corr.final)

        def on_final(x: Tensor, hook) -> Tensor:
            final["ln_final.hook_in"] = to_logits(x, hook)
            return final["ln_final.hook_in"]

        return [*hooks, ("ln_final.hook_in", on_final)]


def edge_run(
    model: Model,
    graph: Graph,
    tokens: Int[Tensor, "n pos"],
    corr: RunActs,
    sets: Sequence[Tensor],
    *,
    mode: str = "keep",
    scale: float = 1.0,
) -> Tensor:
    """Final-position logits ``[len(sets) * n, vocab]`` of the clean ``tokens`` run with the edges of each mask in
    ``sets`` patched (``mode``: see the module); ``corr``: the corrupted run of the same prompts (:func:`run_acts`)."""
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r}; choose from {MODES}")
    R, n = len(sets), tokens.shape[0]
    masks = torch.stack([m.to(torch.bool) for m in sets])  # [R, S, Rcv]
    if masks.shape[1:] != (graph.n_senders, graph.n_receivers):
        raise InputError(
            f"edge masks must be [senders, receivers] = [{graph.n_senders}, {graph.n_receivers}], "
            f"got {tuple(masks.shape[1:])}"
        )
    masks = masks & graph.valid
    final: dict[str, Tensor] = {}
    hooks = _EdgeHooks(model, graph, corr, masks, n, mode=mode, scale=scale).hooks(final)
    with torch.no_grad():
        return _last_logits(model, _rows(tokens, R), hooks, final)


def edge_metric(
    model: Model,
    graph: Graph,
    tokens: Tensor,
    corr: RunActs,
    sets: Sequence[Tensor],
    metric: Metric,
    rows: slice,
    *,
    mode: str = "keep",
    scale: float = 1.0,
) -> Tensor:
    """The metric ``[len(sets), n]`` of :func:`edge_run`, per group and prompt."""
    logits = edge_run(model, graph, tokens, corr, sets, mode=mode, scale=scale)
    n = tokens.shape[0]
    return torch.stack([metric(chunk, rows) for chunk in logits.split(n)]).double().cpu()


def _groups(
    model: Model,
    graph: Graph,
    clean: Tensor,
    corrupted: Tensor,
    sets: list[Tensor],
    metric: Metric,
    *,
    mode: str,
    scale: float,
    batch_size: int,
    max_rows: int,
) -> Tensor:
    """``[len(sets)]``: the metric of each group, averaged over every prompt (batches of prompts; groups of
    ``max_rows // batch`` masks per forward)."""
    dt = torch.float64 if next(model.parameters()).dtype == torch.float64 else torch.float32
    total = torch.zeros(len(sets), dtype=torch.float64)
    for start in range(0, clean.shape[0], batch_size):
        rows = slice(start, min(start + batch_size, clean.shape[0]))
        corr = run_acts(model, graph, corrupted[rows], dt)
        n = rows.stop - rows.start
        per = max(1, max_rows // n)
        for i in range(0, len(sets), per):
            got = edge_metric(model, graph, clean[rows], corr, sets[i : i + per], metric, rows, mode=mode, scale=scale)
            total[i : i + per] += got.double().sum(1)
    return total / clean.shape[0]


def exact_scores(
    model: Model,
    graph: Graph,
    clean: Tensor,
    corrupted: Tensor,
    edges: Sequence[tuple[int, int]],
    metric: Metric,
    *,
    clean_metric: float,
    scale: float = 1.0,
    batch_size: int = 16,
    max_rows: int = 256,
) -> Tensor:
    """Exact edge patching: ``[len(edges)]`` the mean metric with edge ``(sender, receiver)`` alone reading the
    corrupted sender, minus ``clean_metric`` (what EAP estimates to first order; ``scale``: the change times it)."""
    sets = []
    for s, r in edges:
        m = torch.zeros(graph.n_senders, graph.n_receivers, dtype=torch.bool)
        m[s, r] = True
        sets.append(m)
    got = _groups(
        model,
        graph,
        clean,
        corrupted,
        sets,
        metric,
        mode="ablate",
        scale=scale,
        batch_size=batch_size,
        max_rows=max_rows,
    )
    return got - clean_metric


def faithfulness_runs(
    model: Model,
    graph: Graph,
    clean: Tensor,
    corrupted: Tensor,
    circuits: Sequence[Tensor],
    metric: Metric,
    *,
    batch_size: int = 16,
    max_rows: int = 256,
) -> Tensor:
    """``[len(circuits)]``: the mean metric of the clean prompts with every edge outside each circuit (a
    ``[senders, receivers]`` mask) reading the corrupted sender."""
    return _groups(
        model,
        graph,
        clean,
        corrupted,
        list(circuits),
        metric,
        mode="keep",
        scale=1.0,
        batch_size=batch_size,
        max_rows=max_rows,
    )
