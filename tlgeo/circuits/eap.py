"""Edge attribution patching (EAP; Syed et al. 2023) and EAP with integrated gradients (EAP-IG; Hanna et al. 2024)
over the whole graph (:mod:`.graph`), each edge's score split by the geometry of the sender's write.

The score of an edge ``s -> r`` is the first-order change of the task metric when ``r`` reads the corrupted run's
``s`` instead of the clean run's (noising, one edge at a time):

    score(s -> r) = sum over prompts' positions of (w_s(corrupted) - w_s(clean)) . dM / dx_r

averaged over prompts, where ``x_r`` is the residual ``r`` reads (its own copy: a head's query, key or value input
before the block's norm, an MLP's input, the final norm's input). EAP takes ``dM / dx_r`` on the clean run: one
clean forward (with grad), one corrupted forward, one backward for every edge. EAP-IG averages it over ``ig_steps``
runs whose input embeddings go from the corrupted run's to the clean run's (``alpha = k / steps``, k = 1..steps).

The per-receiver gradients are not per-edge activations: ``dM / dx_r`` of a head's query is ``J_norm(x)^T W_Q^h
dM / dq^h``, one norm vector-Jacobian product per receiver of a block, and a block's scores are one matrix product
``[senders, (prompt, position, d)] @ [(prompt, position, d), receivers]``. The table holds scores only.

Parts (exact: they add up to ``score``): the sender's change split along / across the receiver's residual ``x_r``
on the clean run (the run patched; ``score_par + score_perp``), and for a head sender its self message ``A_tt v_t
W_O`` against the non-self aggregate (``score_self + score_nonself``; :func:`tlgeo.geometry.patch_parts.value_parts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..geometry.parallel import EPS, compute_dtype
from ..geometry.patch_parts import head_writes, value_parts
from ..hooks.resume import StopForward, in_model_dtype, readout_ok
from ..models import Model, input_device
from .graph import Graph, check_graph_support, graph_of, norm_module, qkv_weights

__all__ = ["Metric", "RunActs", "run_acts", "EdgeScores", "eap_scores", "SCORE_COLUMNS", "EDGE_COLUMNS"]

Metric = Callable[[Tensor, slice], Tensor]  # (final-position logits [b, vocab], the prompts' rows) -> [b]
EDGE_COLUMNS = (
    "sender",
    "sender_layer",
    "sender_head",
    "sender_kind",
    "receiver",
    "receiver_layer",
    "receiver_head",
    "receiver_input",
)
SCORE_COLUMNS = ("score", "score_par", "score_perp", "score_self", "score_nonself")
RESID0 = "blocks.0.hook_resid_pre"


def _names(graph: Graph) -> list[str]:
    """The hooks a run's writes and receivers' residuals are read from."""
    out = [RESID0, "ln_final.hook_in"]
    for l in range(graph.n_layers):
        out += [
            f"blocks.{l}.attn.hook_z",
            f"blocks.{l}.attn.hook_v",
            f"blocks.{l}.attn.hook_pattern",
            f"blocks.{l}.hook_mlp_out",
            f"blocks.{l}.ln1.hook_in",
            f"blocks.{l}.ln2.hook_in",
        ]
    return out


@dataclass
class RunActs:
    """One run of a batch of prompts: every sender's write ``writes`` ``[senders, b, pos, d]`` (the self message
    of a head's write in ``self_writes``, 0 for other senders) and each receiver block's residual: ``attn_in``
    (block input, ``[layer, b, pos, d]``), ``mlp_in`` (the MLP's input residual) and ``final`` (the final norm's
    input, ``[b, pos, d]``), in the compute dtype; ``metric`` ``[b]``."""

    writes: Tensor
    self_writes: Tensor
    attn_in: Tensor
    mlp_in: Tensor
    final: Tensor
    metric: Tensor


def _writes(model: Model, graph: Graph, acts: dict[str, Tensor], dt: torch.dtype) -> tuple[Tensor, Tensor]:
    x0 = acts[RESID0].to(dt)
    writes, selfs = [x0[None]], [torch.zeros_like(x0)[None]]
    for l in range(graph.n_layers):
        w_o = qkv_weights(model, l)["o"][0].to(x0.device)
        z = acts[f"blocks.{l}.attn.hook_z"]
        parts = value_parts(z, acts[f"blocks.{l}.attn.hook_v"], acts[f"blocks.{l}.attn.hook_pattern"])
        writes.append(head_writes(z, w_o).to(dt).permute(2, 0, 1, 3))
        selfs.append(head_writes(parts.self_msg, w_o).to(dt).permute(2, 0, 1, 3))
        writes.append(acts[f"blocks.{l}.hook_mlp_out"].to(dt)[None])
        selfs.append(torch.zeros_like(x0)[None])
    return torch.cat(writes), torch.cat(selfs)


def run_acts(
    model: Model, graph: Graph, tokens: Int[Tensor, "b pos"], metric: Metric, rows: slice, dt: torch.dtype
) -> RunActs:
    """One no-grad forward of ``tokens``: its :class:`RunActs`."""
    acts: dict[str, Tensor] = {}
    with torch.no_grad():
        logits = _last_logits(model, tokens, [(n, _grab(acts, n, detach=True)) for n in _names(graph)], acts)
    return _acts(model, graph, acts, dt, metric(logits, rows).detach())


def _last_logits(model: Model, tokens: Tensor, hooks: list, kept: dict[str, Tensor]) -> Tensor:
    """The final position's logits ``[b, vocab]`` of a forward with ``hooks``, which keep the final norm's input in
    ``kept``: the forward stops there and only the last position is read out (the unembedding of every position,
    and its backward, are most of a small model's forward), where that is what the model computes
    (:func:`~tlgeo.hooks.resume.readout_ok`); else the whole forward."""
    tokens = tokens.to(input_device(model))
    if not readout_ok(model, tokens):
        with model.hooks(fwd_hooks=hooks):
            return model(tokens)[:, -1]

    def stop(x: Tensor, hook) -> None:
        raise StopForward

    with model.hooks(fwd_hooks=[*hooks, ("ln_final.hook_in", stop)]):
        try:
            model(tokens)
        except StopForward:
            pass
    final = kept["ln_final.hook_in"][:, -1]
    h = norm_module(model, "ln_final")(in_model_dtype(model, final)[None])  # the HF norm: no hook fires again
    project = getattr(model, "project_out", None)
    return model.unembed(h if project is None else project(h))[0]


def _acts(model: Model, graph: Graph, acts: dict[str, Tensor], dt: torch.dtype, metric: Tensor) -> RunActs:
    writes, selfs = _writes(model, graph, acts, dt)
    L = graph.n_layers
    return RunActs(
        writes,
        selfs,
        torch.stack([acts[f"blocks.{l}.ln1.hook_in"].to(dt) for l in range(L)]),
        torch.stack([acts[f"blocks.{l}.ln2.hook_in"].to(dt) for l in range(L)]),
        acts["ln_final.hook_in"].to(dt),
        metric,
    )


def _grad_pass(
    model: Model, graph: Graph, tokens: Tensor, metric: Metric, rows: slice, dt: torch.dtype, x0: Tensor | None = None
) -> dict[int, Tensor]:
    """One forward (its input embedding replaced by ``x0`` where given) and one backward of the summed metric:
    ``dM / dx_r`` per receiver group, ``{receiver index of the group's first: [g, b, pos, d]}`` (a block's q, k,
    v receivers together; each MLP; the logits), in the compute dtype."""
    keep: dict[str, Tensor] = {}
    fwd = []

    def leaf(x: Tensor, hook) -> Tensor:
        return (x if x0 is None else x0.to(x.device, x.dtype)).detach().clone().requires_grad_(True)

    fwd.append((RESID0, leaf))
    targets = ["ln_final.hook_in"]
    for l in range(graph.n_layers):
        targets += [f"blocks.{l}.attn.hook_{i}" for i in "qkv"] + [f"blocks.{l}.ln2.hook_in"]
        fwd.append((f"blocks.{l}.ln1.hook_in", _grab(keep, f"blocks.{l}.ln1.hook_in")))
    fwd += [(n, _grab(keep, n)) for n in targets]
    with torch.enable_grad():
        total = metric(_last_logits(model, tokens, fwd, keep), rows).sum()
        grads = dict(zip(targets, torch.autograd.grad(total, [keep[n] for n in targets], allow_unused=True)))
    out: dict[int, Tensor] = {}
    for l in range(graph.n_layers):
        w = qkv_weights(model, l)
        us = []
        for i in "qkv":
            g = grads[f"blocks.{l}.attn.hook_{i}"]
            W = w[i][0].to(g.device)
            us.append(
                torch.zeros(*g.shape[:2], W.shape[0], W.shape[1], dtype=g.dtype, device=g.device)
                if g is None
                else torch.einsum("bphe,hde->bphd", g, W.to(g.dtype))
            )
        u = torch.cat(us, dim=2)  # [b, pos, receivers, d]: in the norm's output space
        x = keep[f"blocks.{l}.ln1.hook_in"].detach()
        out[graph.block_receivers(l).start] = _norm_vjp(norm_module(model, "ln1", l), x, u).to(dt).permute(2, 0, 1, 3)
        g = grads[f"blocks.{l}.ln2.hook_in"]
        out[graph.mlp_receiver(l)] = (torch.zeros_like(x) if g is None else g).to(dt)[None]
    out[graph.logits_receiver] = grads["ln_final.hook_in"].to(dt)[None]
    return out


def _norm_vjp(norm, x: Float[Tensor, "b pos d"], u: Float[Tensor, "b pos g d"]) -> Float[Tensor, "b pos g d"]:
    """``J_norm(x)^T u_g`` for each ``g``: the gradient at the norm's input of each receiver's own copy."""
    xr = x.unsqueeze(2).expand(*u.shape[:3], x.shape[-1]).detach().clone().requires_grad_(True)
    with torch.enable_grad():
        y = norm(xr)
        (gx,) = torch.autograd.grad(y, xr, u.to(y.dtype))
    return gx


def _unit(ref: Tensor) -> Tensor:
    """``ref / ||ref||`` over the last dim (0 where ``||ref||^2 < EPS``: a zero reference has no parallel part)."""
    n2 = (ref * ref).sum(-1, keepdim=True)
    return torch.where(n2 < EPS, torch.zeros_like(ref), ref / n2.clamp_min(EPS).sqrt())


@dataclass
class EdgeScores:
    """Every sender x receiver score of one task: ``score``, ``par`` and ``self_`` ``[senders, receivers]``
    (float64, summed over prompts until :meth:`finish` divides by ``n``); ``perp = score - par``,
    ``nonself = score - self_``. Entries that are no edge (:attr:`Graph.valid`) are 0."""

    graph: Graph
    score: Tensor
    par: Tensor
    self_: Tensor
    n: int = 0

    @classmethod
    def zeros(cls, graph: Graph) -> "EdgeScores":
        z = lambda: torch.zeros(graph.n_senders, graph.n_receivers, dtype=torch.float64)  # noqa: E731
        return cls(graph, z(), z(), z())

    def add(self, d: Tensor, d_self: Tensor, grads: dict[int, Tensor], refs: Tensor, weight: float) -> None:
        """Add ``weight x`` the scores of one batch: ``d`` ``[senders, b, pos, d]`` the senders' changes (``d_self``:
        their self messages'), ``grads`` the receivers' gradients by group (:func:`_grad_pass`), ``refs``
        ``[2 n_layers + 1, b, pos, d]`` the receivers' residuals (each block's input, each MLP's input, the final
        norm's input). One matrix product for every sender x receiver pair (the pairs that are no edge are computed
        and dropped: a few well-shaped products are faster than one per block of the sender prefix each reads)."""
        g = self.graph
        G = torch.cat([grads[k] for k in sorted(grads)])  # [receivers, b, pos, d] in index order
        dm, gm, dsm = d.flatten(1), G.flatten(1), d_self.flatten(1)
        for rs in self._chunks():  # receivers by blocks: each chunk's product over the senders written before it
            pre = g.prefix(rs.stop - 1)
            self.score[:pre, rs] += weight * (dm[:pre] @ gm[rs].T).double().cpu()
            self.self_[:pre, rs] += weight * (dsm[:pre] @ gm[rs].T).double().cpu()
        unit = _unit(refs)  # [K, b, pos, d]
        K, b, p, dim = unit.shape
        # a[b p, s, k] = d_s . u_k and c[r, b p] = g_r . u_(ref of r), per position
        a = torch.bmm(d.permute(1, 2, 0, 3).reshape(b * p, -1, dim), unit.permute(1, 2, 3, 0).reshape(b * p, dim, K))
        ref_of = torch.tensor([self._ref(r) for r in range(g.n_receivers)])
        c = (G * unit[ref_of]).sum(-1).flatten(1)  # [receivers, b p]
        for k in range(K):
            rs = torch.nonzero(ref_of == k)[:, 0]
            self.par[:, rs] += weight * (a[:, :, k].T @ c[rs].T).double().cpu()

    def _chunks(self, n: int = 4) -> list[slice]:
        """The receivers in about ``n`` runs of whole blocks (the logits in the last)."""
        g = self.graph
        cuts = sorted({round(i * g.n_layers / n) for i in range(n + 1)})
        out = [slice(a * g.per_block, b * g.per_block) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
        return out[:-1] + [slice(out[-1].start, g.n_receivers)]

    def _ref(self, receiver: int) -> int:
        """Which of the residuals of :meth:`add` ``receiver`` reads."""
        g = self.graph
        if receiver == g.logits_receiver:
            return 2 * g.n_layers
        layer, pos = divmod(receiver, g.per_block)
        return g.n_layers + layer if pos == g.per_block - 1 else layer

    def finish(self, n: int) -> "EdgeScores":
        """Divide the sums over ``n`` prompts: means per prompt, as the task metric is."""
        valid = self.graph.valid
        for t in (self.score, self.par, self.self_):
            t /= n
            t[~valid] = 0.0
        self.n = n
        return self

    def matrix(self, part: str = "score") -> Tensor:
        """``[senders, receivers]`` of a column of :data:`SCORE_COLUMNS` (``score``, ``score_par``, ...)."""
        got = {
            "score": self.score,
            "score_par": self.par,
            "score_perp": self.score - self.par,
            "score_self": self.self_,
            "score_nonself": self.score - self.self_,
        }
        if part not in got:
            raise InputError(f"unknown part {part!r}; choose from {SCORE_COLUMNS}")
        return got[part]

    def table(self) -> pd.DataFrame:
        """One row per edge: :data:`EDGE_COLUMNS`, :data:`SCORE_COLUMNS` (``score_self`` / ``score_nonself`` NaN
        for a sender that is no head) and ``rank`` (1 = largest ``|score|``)."""
        g = self.graph
        s_idx, r_idx = torch.nonzero(g.valid, as_tuple=True)
        s_idx, r_idx = s_idx.numpy(), r_idx.numpy()
        df = pd.concat(
            [g.senders.iloc[s_idx].reset_index(drop=True), g.receivers.iloc[r_idx].reset_index(drop=True)], axis=1
        )
        for col in SCORE_COLUMNS:
            df[col] = self.matrix(col).numpy()[s_idx, r_idx]
        head = df["sender_kind"].eq("head").to_numpy()
        df.loc[~head, ["score_self", "score_nonself"]] = np.nan
        df["rank"] = df["score"].abs().rank(ascending=False, method="first").astype(int)
        return df


def eap_scores(
    model: Model,
    clean: Int[Tensor, "n pos"],
    corrupted: Int[Tensor, "n pos"],
    metric: Metric,
    *,
    ig_steps: int = 0,
    batch_size: int = 16,
) -> EdgeScores:
    """EAP (``ig_steps`` 0) or EAP-IG scores of every edge of ``model``'s graph for the prompt pairs ``clean`` /
    ``corrupted`` (aligned token ids, the same length); ``metric(logits, rows)``: the per-prompt metric of the
    final position's logits of prompts ``rows``. Per batch of prompts: a corrupted and a clean forward without
    grad (EAP-IG; EAP takes the clean one from its gradient pass) and ``max(1, ig_steps)`` forward-backward passes."""
    check_graph_support(model)
    if clean.shape != corrupted.shape:
        raise InputError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} prompts differ in shape")
    if ig_steps < 0:
        raise InputError(f"ig_steps must be >= 0, got {ig_steps}")
    graph = graph_of(model)
    dt = compute_dtype(next(p for p in model.parameters() if p.is_floating_point()))
    out = EdgeScores.zeros(graph)
    for start in range(0, clean.shape[0], batch_size):
        rows = slice(start, min(start + batch_size, clean.shape[0]))
        corr = run_acts(model, graph, corrupted[rows], metric, rows, dt)
        if ig_steps == 0:
            cl, grads = _clean_with_grads(model, graph, clean[rows], metric, rows, dt)
            passes = [(grads, 1.0)]
        else:
            cl = run_acts(model, graph, clean[rows], metric, rows, dt)
            x0c, x0r = cl.writes[0], corr.writes[0]
            passes = (
                (
                    _grad_pass(
                        model,
                        graph,
                        clean[rows],
                        metric,
                        rows,
                        dt,
                        in_model_dtype(model, x0r + (k / ig_steps) * (x0c - x0r)),
                    ),
                    1.0 / ig_steps,
                )
                for k in range(1, ig_steps + 1)
            )
        d, d_self = corr.writes - cl.writes, corr.self_writes - cl.self_writes
        refs = torch.cat([cl.attn_in, cl.mlp_in, cl.final[None]])
        for grads, weight in passes:
            out.add(d, d_self, grads, refs, weight)
    return out.finish(clean.shape[0])


def _clean_with_grads(
    model: Model, graph: Graph, tokens: Tensor, metric: Metric, rows: slice, dt: torch.dtype
) -> tuple[RunActs, dict[int, Tensor]]:
    """The clean run's :class:`RunActs` and receivers' gradients from one forward and backward."""
    acts: dict[str, Tensor] = {}
    with model.hooks(fwd_hooks=[(n, _grab(acts, n, detach=True)) for n in _names(graph)]):
        grads = _grad_pass(model, graph, tokens, _recording(metric, acts), rows, dt)
    return _acts(model, graph, acts, dt, acts.pop("_metric")), grads


def _grab(store: dict, name: str, detach: bool = False):
    """A hook that keeps its tensor under ``name`` (the name asked for: the bridge's hooks carry canonical names).
    Kept for a gradient (``detach`` False), a copy is kept and returned: the bridge hands some hooks a reshaped copy
    and computes on with what the hook returns, and a norm's input is the very tensor the residual adds to, whose
    gradient would hold the skip path too; the copy's gradient is that of the hook's reader alone."""

    def fn(x: Tensor, hook) -> Tensor | None:
        if detach:
            store[name] = x.detach()
            return None
        store[name] = x.clone()
        return store[name]

    return fn


def _recording(metric: Metric, store: dict) -> Metric:
    def fn(logits: Tensor, rows: slice) -> Tensor:
        m = metric(logits, rows)
        store["_metric"] = m.detach()
        return m

    return fn
