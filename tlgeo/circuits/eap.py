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
dM / dq^h``, one norm vector-Jacobian product per receiver of a block (in closed form for LayerNorm and RMSNorm,
folded into the block's q, k, v projections), built a run of blocks at a time into one buffer; a run's scores are
one matrix product ``[senders, (prompt, position, d)] @ [(prompt, position, d), receivers]``. The table holds
scores only.

Parts (exact: they add up to ``score``): the sender's change split along / across the receiver's residual ``x_r``
on the clean run (the run patched; ``score_par + score_perp``), and for a head sender its self message ``A_tt v_t
W_O`` against the non-self aggregate (``score_self + score_nonself``; :func:`tlgeo.geometry.patch_parts.value_parts`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..geometry.parallel import EPS, compute_dtype
from ..geometry.patch_parts import value_parts
from ..hooks.resume import StopForward, in_model_dtype, readout_ok
from ..models import Model, input_device
from ..patching.runs import W_O
from .graph import Graph, check_graph_support, graph_of, norm_module, qkv_weights

__all__ = [
    "Metric",
    "RunActs",
    "run_acts",
    "run_metric",
    "changes",
    "first_change",
    "EdgeScores",
    "eap_scores",
    "SCORE_COLUMNS",
    "EDGE_COLUMNS",
]

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
    """One run of a batch of prompts, compact: the input embedding ``x0`` ``[b, pos, d]``, each block's heads'
    outputs before ``W_O`` ``z`` and their self messages ``self_z`` (``A_tt v_t``; ``[layer, b, pos, head,
    d_head]``), each MLP's write ``mlp`` ``[layer, b, pos, d]``, every block's ``W_O`` ``w_o`` ``[layer, head,
    d_head, d]``, and the receivers' residuals ``refs`` ``[2 layer + 1, b, pos, d]`` (each block's input, each
    MLP's input, the final norm's input; ``attn_in``, ``mlp_in``, ``final`` are views of it), in the compute dtype;
    ``metric`` ``[b]``. :attr:`writes` ``[senders, b, pos, d]`` (and :attr:`self_writes`, 0 for senders that are no
    head) are built from them when read; :func:`changes` builds the difference of two runs' without either."""

    graph: Graph
    x0: Tensor
    z: Tensor
    self_z: Tensor
    mlp: Tensor
    w_o: Tensor
    refs: Tensor
    metric: Tensor

    @property
    def attn_in(self) -> Tensor:
        return self.refs[: self.graph.n_layers]

    @property
    def mlp_in(self) -> Tensor:
        return self.refs[self.graph.n_layers : 2 * self.graph.n_layers]

    @property
    def final(self) -> Tensor:
        return self.refs[-1]

    @cached_property
    def writes(self) -> Tensor:
        return _sender_rows(self.graph, self.x0, self.z, self.mlp, self.w_o)

    @cached_property
    def self_writes(self) -> Tensor:
        return _sender_rows(self.graph, None, self.self_z, None, self.w_o)


def _sender_rows(graph: Graph, x0: Tensor | None, z: Tensor, mlp: Tensor | None, w_o: Tensor) -> Tensor:
    """``[senders, b, pos, d]``: row ``input`` ``x0``, a head's ``z^h W_O^h``, an MLP's ``mlp`` (0 where ``x0`` /
    ``mlp`` is None), written into one buffer (one matrix product per block, no concatenation)."""
    L, b, p, H, dh = z.shape
    dm = w_o.shape[-1]
    out = torch.empty(graph.n_senders, b, p, dm, dtype=z.dtype, device=z.device)
    for row, src in [(0, x0)] + [(graph.mlp_sender(l), None if mlp is None else mlp[l]) for l in range(L)]:
        if src is None:
            out[row].zero_()
        else:
            out[row].copy_(src)
    for l in range(L):
        first = graph.head_sender(l, 0)
        heads = z[l].permute(2, 0, 1, 3).reshape(H, b * p, dh)
        torch.bmm(heads, w_o[l], out=out[first : first + H].view(H, b * p, dm))
    return out


def changes(a: RunActs, b: RunActs, positions: slice = slice(None)) -> tuple[Tensor, Tensor]:
    """``a``'s writes less ``b``'s and the same of their self messages, ``[senders, b, pos, d]`` each, at
    ``positions``: a head's is ``(z_a - z_b) W_O`` (one product of the difference; neither run's own writes are
    built)."""
    at = lambda t: t[:, :, positions]  # noqa: E731  ([layer, b, pos, ...])
    d = _sender_rows(a.graph, (a.x0 - b.x0)[:, positions], at(a.z) - at(b.z), at(a.mlp) - at(b.mlp), a.w_o)
    return d, _sender_rows(a.graph, None, at(a.self_z) - at(b.self_z), None, a.w_o)


def first_change(clean: Tensor, corrupted: Tensor) -> int:
    """The first position at which some prompt's clean and corrupted tokens differ (their length where none do):
    before it the two runs of a causal model are the same computation, every sender's change is 0 and adds nothing
    to a score."""
    differs = (clean != corrupted).any(0).nonzero()
    return int(differs[0]) if len(differs) else clean.shape[1]


def run_acts(
    model: Model,
    graph: Graph,
    tokens: Int[Tensor, "b pos"],
    metric: Metric,
    rows: slice,
    dt: torch.dtype,
    w_o: Tensor | None = None,
) -> RunActs:
    """One no-grad forward of ``tokens``: its :class:`RunActs` (``w_o``: the model's ``W_O``s, read where not
    given; another run's of the same model may be passed)."""
    acts: dict[str, Tensor] = {}
    with torch.no_grad():
        logits = _last_logits(model, tokens, [(n, _grab(acts, n, detach=True)) for n in _names(graph)], acts)
    return _acts(model, graph, acts, dt, metric(logits, rows).detach(), w_o)


def run_metric(model: Model, tokens: Int[Tensor, "b pos"], metric: Metric, rows: slice) -> Tensor:
    """The metric ``[b]`` of one no-grad forward of ``tokens`` (no activation kept but the final norm's input)."""
    kept: dict[str, Tensor] = {}
    with torch.no_grad():
        logits = _last_logits(model, tokens, [("ln_final.hook_in", _grab(kept, "ln_final.hook_in", detach=True))], kept)
    return metric(logits, rows).detach()


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


def _acts(
    model: Model, graph: Graph, acts: dict[str, Tensor], dt: torch.dtype, metric: Tensor, w_o: Tensor | None
) -> RunActs:
    L = graph.n_layers
    dev = acts[RESID0].device  # a sharded model's blocks write on their own devices
    here = lambda name: acts[name].to(dev, dt)  # noqa: E731
    self_z = [
        value_parts(*(acts[f"blocks.{l}.attn.hook_{n}"].to(dev) for n in ("z", "v", "pattern"))).self_msg
        for l in range(L)
    ]
    refs = [f"blocks.{l}.ln1.hook_in" for l in range(L)] + [f"blocks.{l}.ln2.hook_in" for l in range(L)]
    return RunActs(
        graph,
        here(RESID0),
        torch.stack([here(f"blocks.{l}.attn.hook_z") for l in range(L)]),
        torch.stack(self_z).to(dt),
        torch.stack([here(f"blocks.{l}.hook_mlp_out") for l in range(L)]),
        torch.stack([W_O(model, l).to(dev, dt) for l in range(L)]) if w_o is None else w_o,
        torch.stack([here(n) for n in [*refs, "ln_final.hook_in"]]),
        metric,
    )


def _grad_pass(
    model: Model,
    graph: Graph,
    tokens: Tensor,
    metric: Metric,
    rows: slice,
    dt: torch.dtype,
    x0: Tensor | None = None,
    at: slice = slice(None),
) -> ReceiverGrads:
    """One forward (its input embedding replaced by ``x0`` where given) and one backward of the summed metric: the
    receivers' gradients at positions ``at`` (:class:`ReceiverGrads`)."""
    keep: dict[str, Tensor] = {}
    fwd = []

    def leaf(x: Tensor, hook) -> Tensor:
        keep[RESID0] = (x if x0 is None else x0.to(x.device, x.dtype)).detach().clone().requires_grad_(True)
        return keep[RESID0]

    fwd.append((RESID0, leaf))
    targets = ["ln_final.hook_in"]
    for l in range(graph.n_layers):
        targets += [f"blocks.{l}.attn.hook_{i}" for i in "qkv"] + [f"blocks.{l}.ln2.hook_in"]
        fwd.append((f"blocks.{l}.ln1.hook_in", _grab(keep, f"blocks.{l}.ln1.hook_in")))
    fwd += [(n, _grab(keep, n)) for n in targets]
    with torch.enable_grad():
        total = metric(_last_logits(model, tokens, fwd, keep), rows).sum()
        got = torch.autograd.grad(total, [keep[n] for n in targets], allow_unused=True)
    grads = {n: None if g is None else g[:, at] for n, g in zip(targets, got)}
    x = [keep[f"blocks.{l}.ln1.hook_in"].detach()[:, at] for l in range(graph.n_layers)]
    return ReceiverGrads(model, graph, grads, x, dt, keep[RESID0].device)


@dataclass
class ReceiverGrads:
    """The receivers' gradients ``dM / dx_r`` of one backward, ``[receivers, b, pos, d]`` in receiver index order,
    built a run of whole blocks at a time (:meth:`rows`: the graph's gradients are never all in memory at once).
    Kept: the gradients autograd gave at each block's q, k, v inputs (``grads``: ``[b, pos, head, d_head]`` by hook
    name; each MLP's and the final norm's input, ``[b, pos, d]``) and the blocks' norm inputs ``x``; a block's
    receivers' are ``J_norm(x)^T W^h dM / dq^h`` (:func:`_norm_vjp`), in the compute dtype ``dt`` on ``device``."""

    model: Model
    graph: Graph
    grads: dict[str, Tensor | None]
    x: list[Tensor]
    dt: torch.dtype
    device: torch.device

    def rows(self, receivers: slice, out: Tensor | None = None) -> Tensor:
        """The gradients of ``receivers`` (a run of whole blocks, or ending with the logits), written into ``out``
        (``[>= its length, b, pos, d]``; its first rows are returned) or a new tensor."""
        g, (b, p, dim) = self.graph, self.x[0].shape
        n = receivers.stop - receivers.start
        if out is None:
            out = torch.empty(n, b, p, dim, dtype=self.dt, device=self.device)
        out = out[:n]
        for r in range(receivers.start, receivers.stop, g.per_block):
            l = r // g.per_block
            if l == g.n_layers:  # the logits
                out[r - receivers.start] = self.grads["ln_final.hook_in"]
                continue
            self._block(l, out[r - receivers.start : r - receivers.start + g.per_block - 1])
            mlp = self.grads[f"blocks.{l}.ln2.hook_in"]
            if mlp is None:
                out[g.mlp_receiver(l) - receivers.start].zero_()
            else:
                out[g.mlp_receiver(l) - receivers.start] = mlp
        return out

    def _block(self, l: int, out: Tensor) -> None:
        """Block ``l``'s q, k, v receivers' gradients into ``out`` ``[per_block - 1, b, pos, d]``."""
        w, x = qkv_weights(self.model, l), self.x[l]
        gh, W = [], []  # [heads, b, pos, d_head] and [heads, d, d_head] of the block's q, k, v receivers in order
        for i in "qkv":
            W.append(w[i][0])
            g = self.grads[f"blocks.{l}.attn.hook_{i}"]  # [b, pos, heads, d_head]
            gh.append(x.new_zeros(W[-1].shape[0], *x.shape[:2], W[-1].shape[2]) if g is None else g.permute(2, 0, 1, 3))
        here = x.device == out.device
        got = _norm_vjp(
            norm_module(self.model, "ln1", l),
            x,
            torch.cat(gh),
            torch.cat(W).to(x.device),
            self.dt,
            out if here else None,
        )
        if not here:
            out.copy_(got)


def _norm_vjp(
    norm,
    x: Float[Tensor, "b pos d"],
    gh: Float[Tensor, "r b pos e"],
    W: Float[Tensor, "r d e"],
    dt: torch.dtype,
    out: Float[Tensor, "r b pos d"] | None = None,
) -> Float[Tensor, "r b pos d"]:
    """``J_norm(x)^T W_r gh_r`` for each receiver ``r`` (``gh_r`` its gradient at its input projection ``W_r``):
    the gradient at the norm's input of each receiver's own copy, in ``dt``, written into ``out`` where given. In
    closed form where the norm is a LayerNorm or an RMSNorm (:func:`_norm_form`, checked against autograd once per
    module); else ``u_r = W_r gh_r`` and one forward of the norm and its vector-Jacobian product mapped over ``r``
    (the transform differentiates under ``no_grad``, which keeps the norm's weights out of it), or, for a norm
    accelerate offloads, a forward and backward of ``r`` copies of ``x``."""
    form = _norm_form(norm, x)
    if form is not None:
        return _closed_vjp(form, x.to(dt), gh.to(dt), W.to(dt), out)
    r, b, p, e = gh.shape
    u = torch.bmm(gh.reshape(r, b * p, e).to(x.dtype), W.to(x.dtype).transpose(1, 2)).view(r, b, p, -1)
    got = _autograd_vjp(norm, x, u).to(dt)
    return got if out is None else out.copy_(got)


def _autograd_vjp(norm, x: Tensor, u: Tensor) -> Tensor:
    if hasattr(norm, "_hf_hook"):  # accelerate moves its weights in at each call: a plain forward on g copies of x
        xr = x.detach().unsqueeze(0).expand(u.shape[0], *x.shape).clone().requires_grad_(True)
        with torch.enable_grad():
            y = norm(xr)
            (gx,) = torch.autograd.grad(y, xr, u.to(y.dtype))
        return gx
    with torch.no_grad():
        y, vjp = torch.func.vjp(norm, x.detach())
        (gx,) = torch.vmap(vjp)(u.to(y.dtype))
    return gx


_FORMS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # norm module -> its form, or None


def _norm_form(norm, x: Tensor) -> tuple[str, Tensor, float] | None:
    """``(kind, scale, eps)`` of a norm whose vector-Jacobian product has a closed form: ``layer`` (``y = scale (x -
    mean) / sqrt(var + eps) + bias``) or ``rms`` (``y = scale x / sqrt(mean(x^2) + eps)``, ``scale`` the weight or,
    as Gemma's, one plus it), the one whose product equals autograd's on the first input to 1e-5 (the form found
    once per module and kept; the scale read from its weight at each call, which an edit may have changed); ``None``
    for any other norm."""
    if norm not in _FORMS:
        _FORMS[norm] = _find_form(norm, x)
    found = _FORMS[norm]
    return None if found is None else (found[0], _scale(norm, x, found[1]), found[2])


def _scale(norm, x: Tensor, plus_one: bool) -> Tensor:
    w = getattr(norm, "weight", None)
    ones = torch.ones(x.shape[-1], dtype=x.dtype, device=x.device)
    if w is None:
        return ones
    w = w.detach().to(x.device, x.dtype)
    return ones + w if plus_one else w


def _find_form(norm, x: Tensor) -> tuple[str, bool, float] | None:
    """``(kind, whether the scale is one plus the weight, eps)`` (see :func:`_norm_form`), or ``None``: checked on
    ``x`` and a fixed pseudo-random cotangent."""
    w = getattr(norm, "weight", None)
    eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", None))
    if not isinstance(eps, float) or x.dtype not in (torch.float32, torch.float64):
        return None
    if w is not None and w.device.type == "meta":  # offloaded (accelerate): its weight is there during its forward
        return None
    kinds = [("layer", False)] if isinstance(norm, torch.nn.LayerNorm) else [("rms", False), ("rms", True)]
    gen = torch.Generator().manual_seed(0)
    u = torch.randn(1, *x.shape, generator=gen, dtype=x.dtype).to(x.device)
    eye = torch.eye(x.shape[-1], dtype=x.dtype, device=x.device)[None]
    want = _autograd_vjp(norm, x, u)
    for kind, plus_one in kinds:
        got = _closed_vjp((kind, _scale(norm, x, plus_one), eps), x, u, eye)
        if got.shape == want.shape and (got - want).abs().max() <= 1e-5 * want.abs().max().clamp_min(1e-30):
            return kind, plus_one, eps
    return None


def _closed_vjp(form: tuple[str, Tensor, float], x: Tensor, gh: Tensor, W: Tensor, out: Tensor | None = None) -> Tensor:
    """:func:`_norm_vjp` in closed form, ``[r, b, pos, d]``. With ``a_r = scale * W_r gh_r``: an RMSNorm's is ``a /
    rms - x (a . x) / (d rms^3)``, a LayerNorm's ``(a - mean(a) - xh mean(a xh)) / sigma`` (``xh`` the normalised
    ``x``). The scale is folded into ``W`` (for a LayerNorm, ``W`` centred over ``d`` too, which subtracts
    ``mean(a)``) and ``1 / rms`` (``1 / sigma``) into ``gh``: one product writes the ``[r, b, pos, d]`` result, one
    in-place update subtracts its part along ``x`` (``xh``)."""
    kind, scale, eps = form
    r, e, dim = gh.shape[0], gh.shape[-1], x.shape[-1]
    xf = x.reshape(-1, dim)  # [n, d]
    Ws = W * scale[:, None]  # [r, d, e]
    if kind == "rms":
        ref, norm2 = xf, xf.pow(2).mean(-1) + eps  # [n, d], rms^2 [n]
    else:
        xc = xf - xf.mean(-1, keepdim=True)
        norm2 = xc.pow(2).mean(-1) + eps  # sigma^2
        ref, Ws = xc / norm2.sqrt()[:, None], Ws - Ws.mean(1, keepdim=True)
    g = gh.reshape(r, -1, e) / norm2.sqrt()[:, None]  # [r, n, e]
    res = torch.empty(r, *x.shape, dtype=x.dtype, device=x.device) if out is None else out
    flat = res.view(r, -1, dim)
    torch.bmm(g, Ws.transpose(1, 2), out=flat)  # a / rms (a - mean(a), over sigma)
    along = torch.linalg.vecdot(flat, ref) / (dim * (norm2 if kind == "rms" else 1.0))
    flat.addcmul_(ref.expand_as(flat), along[..., None], value=-1.0)
    return res


def _unit(ref: Tensor) -> Tensor:
    """``ref / ||ref||`` over the last dim (0 where ``||ref||^2 < EPS``: a zero reference has no parallel part)."""
    n2 = torch.linalg.vecdot(ref, ref)[..., None]
    return (ref / n2.clamp_min(EPS).sqrt()).masked_fill_(n2 < EPS, 0.0)


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

    def add(self, d: Tensor, d_self: Tensor, grads: ReceiverGrads, refs: Tensor, weight: float) -> None:
        """Add ``weight x`` the scores of one batch: ``d`` ``[senders, b, pos, d]`` the senders' changes (``d_self``:
        their self messages'), ``grads`` the receivers' gradients (:func:`_grad_pass`), ``refs`` ``[2 n_layers + 1,
        b, pos, d]`` the receivers' residuals (each block's input, each MLP's input, the final norm's input). Per
        run of receivers (their gradients built into one buffer, reused), one matrix product for every sender x
        receiver pair (the pairs that are no edge are computed and dropped: a few well-shaped products are faster
        than one per block of the sender prefix each reads)."""
        g = self.graph
        dm, dsm = d.flatten(1), d_self.flatten(1)
        unit = _unit(refs)  # [K, b, pos, d]
        K, b, p, dim = unit.shape
        # a[k, s, b p] = d_s . u_k and c[r, b p] = g_r . u_(ref of r), per position
        a = torch.bmm(d.view(d.shape[0], b * p, dim).transpose(0, 1), unit.view(K, b * p, dim).permute(1, 2, 0))
        a = a.permute(2, 1, 0).contiguous()
        chunks, buf = self._chunks(), None
        for rs in chunks:  # receivers by blocks: each chunk's product over the senders written before it
            G = grads.rows(rs, buf)  # [len(rs), b, pos, d]
            buf = G if buf is None else buf
            gm, pre = G.flatten(1), g.prefix(rs.stop - 1)
            self.score[:pre, rs] += weight * (dm[:pre] @ gm.T).double().cpu()
            self.self_[:pre, rs] += weight * (dsm[:pre] @ gm.T).double().cpu()
            for k, rr in self._readers():  # the receivers that read residual k: c[r, b p] = g_r . u_k, per position
                if rs.start <= rr.start < rs.stop:
                    c = torch.linalg.vecdot(G[rr.start - rs.start : rr.stop - rs.start], unit[k]).flatten(1)
                    self.par[:, rr] += weight * (a[k] @ c.T).double().cpu()

    def _chunks(self, n: int = 4) -> list[slice]:
        """The receivers in about ``n`` runs of whole blocks (the logits in the last), the largest first (the
        buffer :meth:`add` builds them in is sized by it)."""
        g = self.graph
        cuts = sorted({round(i * g.n_layers / n) for i in range(n + 1)})
        out = [slice(a * g.per_block, b * g.per_block) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]
        out = out[:-1] + [slice(out[-1].start, g.n_receivers)]
        return sorted(out, key=lambda rs: rs.start - rs.stop)

    def _readers(self) -> list[tuple[int, slice]]:
        """``(k, receivers)``: the receivers that read residual ``k`` of :meth:`add`'s ``refs``."""
        g, L = self.graph, self.graph.n_layers
        out = [(l, g.block_receivers(l)) for l in range(L)]
        out += [(L + l, slice(g.mlp_receiver(l), g.mlp_receiver(l) + 1)) for l in range(L)]
        return out + [(2 * L, slice(g.logits_receiver, g.logits_receiver + 1))]

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
    out, w_o = EdgeScores.zeros(graph), None
    for start in range(0, clean.shape[0], batch_size):
        rows = slice(start, min(start + batch_size, clean.shape[0]))
        # the positions whose writes change: from the first token that differs, in a causal model; all of them in a
        # bidirectional one (a compiled program's), where a later token changes every position
        causal = getattr(model.cfg, "attention_dir", "causal") == "causal"
        at = slice(first_change(clean[rows], corrupted[rows]) if causal else 0, None)
        if at.start == clean.shape[1]:  # the runs are the same: every score of these prompts is 0
            continue
        corr = run_acts(model, graph, corrupted[rows], metric, rows, dt, w_o)
        w_o = corr.w_o  # the model's, read once
        if ig_steps == 0:
            cl, grads = _clean_with_grads(model, graph, clean[rows], metric, rows, dt, at, w_o)
            passes = [(grads, 1.0)]
        else:
            cl = run_acts(model, graph, clean[rows], metric, rows, dt, w_o)
            x0c, x0r = cl.x0, corr.x0
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
                        at,
                    ),
                    1.0 / ig_steps,
                )
                for k in range(1, ig_steps + 1)
            )
        d, d_self = changes(corr, cl, at)
        refs = cl.refs[:, :, at]
        for grads, weight in passes:
            out.add(d, d_self, grads, refs, weight)
    return out.finish(clean.shape[0])


def _clean_with_grads(
    model: Model,
    graph: Graph,
    tokens: Tensor,
    metric: Metric,
    rows: slice,
    dt: torch.dtype,
    at: slice = slice(None),
    w_o: Tensor | None = None,
) -> tuple[RunActs, ReceiverGrads]:
    """The clean run's :class:`RunActs` and receivers' gradients at positions ``at`` from one forward and backward
    (``w_o``: as :func:`run_acts`)."""
    acts: dict[str, Tensor] = {}
    with model.hooks(fwd_hooks=[(n, _grab(acts, n, detach=True)) for n in _names(graph)]):
        grads = _grad_pass(model, graph, tokens, _recording(metric, acts), rows, dt, at=at)
    return _acts(model, graph, acts, dt, acts.pop("_metric"), w_o), grads


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
