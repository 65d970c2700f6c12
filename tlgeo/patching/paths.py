"""Path patching (Wang et al. 2022, "Interpretability in the Wild", appendix B), geometry-resolved.

A *sender* is one patchable component (:mod:`.components`: a head's whole output, the part of its write
along / across the residual, its self message or non-self aggregate, an MLP or its parts) at a block; a
*receiver* is an attention head's query, key or value input at a later block, or the logits. The sender's
change (source run minus target run, as :meth:`~.components.Component.delta` defines it) is let through to
the receiver only:

1. *Sender pass.* The target run is resumed at the sender's block with the sender patched and every
   attention layer after it frozen at the target run's output (``hook_attn_out``); MLPs and norms are
   recomputed, as Wang et al. do (``through_mlps=False`` freezes the MLPs too: the direct path only). The
   receivers' ``attn.hook_q`` / ``hook_k`` / ``hook_v`` (and, for the logits, the last block's output) are
   read from this pass.
2. *Receiver pass.* The target run is resumed at the receiver's block with only that head's query, key or
   value replaced by what the sender pass read; everything after it runs normally. The task metric of
   this run is ``patched``.

With grouped-query attention a key or value input belongs to a key/value head that ``n_heads / n_kv_heads``
query heads share: patching "head h's key" patches that shared head (column ``kv_head``), and every query
head of its group gets the same row. A receiver ``logits`` reads the sender pass's last-block output
directly (``receiver_layer`` = ``n_layers``, ``receiver_head`` -1).

:func:`path_runs` caches what a sweep needs, :func:`path_sweep` returns one row per (component, sender,
receiver, input) with the per-prompt metric, and :func:`path_effects` turns them into effects with
bootstrap CIs, p-values and Benjamini–Hochberg q-values over the sweep (:mod:`.effects`).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import pandas as pd
import torch
from torch import Tensor

from ..errors import InputError, OutOfRangeError
from ..hooks.adapter import HookList
from ..hooks.resume import StopForward, readout, resume_forward
from ..models import Model
from ..stats.multiple import bh_qvalues
from .components import Component, get_component
from .effects import ALPHA, effect_test
from .exact import _end_logits, _readout_ok, patch_hooks
from .runs import TaskRuns, position_mask, score_rows, task_runs
from .tasks import Task

__all__ = ["RECEIVER_INPUTS", "path_hook_names", "path_runs", "path_sweep", "path_effects", "PATH_COLUMNS"]

RECEIVER_INPUTS = ("q", "k", "v")
PATH_COLUMNS = (
    "component",
    "sender_layer",
    "sender_head",
    "receiver_layer",
    "receiver_head",
    "receiver_input",
    "kv_head",
)


def _kv_head(model: Model, head: int) -> int:
    """The key/value head query head ``head`` reads (itself without grouped-query attention)."""
    n_kv = getattr(model.cfg, "n_key_value_heads", None) or model.cfg.n_heads
    return head // (model.cfg.n_heads // n_kv)


def path_hook_names(
    model: Model,
    comps: Sequence[str | Component],
    sender_layers: Iterable[int],
    receiver_layers: Iterable[int],
    through_mlps: bool,
    logits: bool,
) -> list[str]:
    """Every hook a path sweep reads from the cached runs."""
    s_layers, r_layers = sorted(set(sender_layers)), sorted(set(receiver_layers))
    last = model.cfg.n_layers if logits else max(r_layers, default=0)
    names = []
    for layer in s_layers:
        names.append(f"blocks.{layer}.hook_resid_pre")
        for c in map(get_component, comps):
            names += [f"blocks.{layer}.{c.site.target}", *(f"blocks.{layer}.{h}" for _, h in c.site.read_hooks(model))]
    names += [f"blocks.{layer}.hook_resid_pre" for layer in r_layers]
    first = min(s_layers, default=last)
    names += [f"blocks.{layer}.hook_attn_out" for layer in range(first + 1, last)]
    if not through_mlps:
        names += [f"blocks.{layer}.hook_mlp_out" for layer in range(first, last)]
    return list(dict.fromkeys(names))


def path_runs(
    model: Model,
    task: Task,
    components: Iterable[str | Component],
    sender_layers: Iterable[int],
    receiver_layers: Iterable[int] = (),
    *,
    through_mlps: bool = True,
    logits: bool = False,
    batch_size: int = 32,
) -> TaskRuns:
    """The task's clean and corrupted runs, caching what :func:`path_sweep` needs for these senders' blocks
    and receivers' blocks (``logits``: also a receiver at the logits): :func:`~.runs.task_runs` with the
    :func:`path_hook_names`."""
    senders = sorted(set(sender_layers))
    names = path_hook_names(model, list(components), senders, receiver_layers, through_mlps, logits)
    return task_runs(model, task, (), senders, batch_size=batch_size, extra=names)


def _rows(t: Tensor, reps: int) -> Tensor:
    return t.repeat(reps, *([1] * (t.ndim - 1)))


def _sender_pass(
    model: Model,
    runs: TaskRuns,
    c: Component,
    layer: int,
    heads: list[int] | None,
    captures: Sequence[str],
    last: int,
    *,
    direction: str,
    positions: str,
    frame: str,
    through_mlps: bool,
) -> dict[str, Tensor]:
    """The target run resumed at ``layer`` with ``c`` of each of ``heads`` patched (one copy of the prompts
    per head; ``None``: a layer component, one copy), attention frozen at blocks ``layer+1 .. last-1``, MLPs
    recomputed (or frozen, ``through_mlps=False``); the hooks ``captures`` as this pass computes them."""
    target, source = runs.pair(direction)
    n, reps = runs.task.n, 1 if heads is None else len(heads)
    site_names = [f"blocks.{layer}.{c.site.target}", *(f"blocks.{layer}.{h}" for _, h in c.site.read_hooks(model))]
    src = {k: _rows(source.acts[k], reps) for k in site_names}
    mask = None if heads is None else torch.eye(model.cfg.n_heads)[heads].repeat_interleave(n, 0)
    pos = position_mask(runs.task, positions)
    hooks: HookList = patch_hooks(
        model, [c], layer, src, heads=mask, pos=None if pos is None else pos.repeat(reps, 1), frame=frame
    )

    def frozen(name: str):
        value = _rows(target.acts[name], reps)
        return lambda x, hook: value.to(x.device, x.dtype)

    hooks += [(f"blocks.{l}.hook_attn_out", frozen(f"blocks.{l}.hook_attn_out")) for l in range(layer + 1, last)]
    if not through_mlps:
        first_mlp = layer + 1 if c.scope == "layer" else layer  # an MLP sender's own output is the patch
        hooks += [(f"blocks.{l}.hook_mlp_out", frozen(f"blocks.{l}.hook_mlp_out")) for l in range(first_mlp, last)]
    got: dict[str, Tensor] = {}

    def grab(name: str):
        def fn(x: Tensor, hook) -> None:
            got[name] = x.detach()
            if len(got) == len(captures):
                raise StopForward

        return fn

    hooks += [(name, grab(name)) for name in captures]
    resid = _rows(target.acts[f"blocks.{layer}.hook_resid_pre"], reps)
    with torch.no_grad():
        try:
            resume_forward(model, resid, layer, hooks)
        except StopForward:
            pass
    return got


def _receiver_metric(
    model: Model,
    runs: TaskRuns,
    layer: int,
    inp: str,
    units: list[int],
    captured: Tensor,
    *,
    direction: str,
    use_readout: bool,
) -> Tensor:
    """Per-prompt metric ``[len(units), rows]`` of the target run with input ``inp`` of each receiver unit (a
    query head for ``q``, a key/value head for ``k`` / ``v``) at block ``layer`` replaced by ``captured``
    (``[rows, pos, units, d_head]``, rows = senders x prompts), one copy of the rows per unit."""
    target, _ = runs.pair(direction)
    rows, reps = captured.shape[0], len(units)

    def replace(x: Tensor, hook) -> Tensor:
        out = x.clone()
        for i, u in enumerate(units):
            out[i * rows : (i + 1) * rows, :, u] = captured[:, :, u].to(x.device, x.dtype)
        return out

    resid = _rows(target.acts[f"blocks.{layer}.hook_resid_pre"], reps * rows // runs.task.n)
    with torch.no_grad():
        logits = _end_logits(model, resid, layer, [(f"blocks.{layer}.attn.hook_{inp}", replace)], use_readout)
    return score_rows(runs.task, logits).float().cpu().reshape(reps, rows)


def _check_heads(model: Model, pairs: Iterable[tuple[int, int]], what: str, allow_layer: bool) -> list[tuple[int, int]]:
    out = []
    for layer, head in pairs:
        if not isinstance(layer, int) or not 0 <= layer < model.cfg.n_layers:
            raise OutOfRangeError(
                f"{what} block {layer!r} out of range: the model has {model.cfg.n_layers} (0..{model.cfg.n_layers - 1})"
            )
        if not (isinstance(head, int) and (0 <= head < model.cfg.n_heads or (allow_layer and head == -1))):
            raise OutOfRangeError(
                f"{what} head {head!r} out of range: the model has {model.cfg.n_heads} heads "
                f"(0..{model.cfg.n_heads - 1})"
            )
        out.append((layer, head))
    return list(dict.fromkeys(out))


def _checked_path_args(
    model: Model,
    runs: TaskRuns,
    comps: list[Component],
    inputs: list[str],
    senders: Iterable[tuple[int, int]],
    receivers: Iterable[tuple[int, int]],
    logits: bool,
    through_mlps: bool,
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[int]]:
    """The checked senders, receivers and receiver blocks; raise on a bad input or hooks ``runs`` did not cache."""
    bad = [i for i in inputs if i not in RECEIVER_INPUTS]
    if bad:
        raise InputError(f"unknown receiver input(s) {bad}; choose from {RECEIVER_INPUTS}")
    if not comps:
        raise InputError("no sender component")
    senders = _check_heads(model, senders, "sender", allow_layer=True)
    receivers = _check_heads(model, receivers, "receiver", allow_layer=False)
    if not senders or not (receivers and inputs or logits):
        raise InputError("a path needs at least one sender and one receiver (a head's input, or logits=True)")
    r_layers = sorted({l for l, _ in receivers})
    need = path_hook_names(model, comps, {l for l, _ in senders}, r_layers, through_mlps, logits)
    missing = [n for n in need if n not in runs.clean.acts]
    if missing:
        more = "..." if len(missing) > 3 else ""
        raise InputError(
            f"the runs of task {runs.task.name!r} did not cache {missing[:3]}{more}: "
            f"make them with path_runs(model, task, components, sender_layers, receiver_layers, "
            f"through_mlps=..., logits=...) naming these senders and receivers"
        )
    return senders, receivers, r_layers


def _path_readout(model: Model, runs: TaskRuns, direction: str, senders: list[tuple[int, int]], logits: bool) -> bool:
    """Whether the final norm and unembedding read this model's output (checked once per direction, cached)."""
    target, _ = runs.pair(direction)
    if direction not in runs.readout:
        # checked from a block whose residual the runs cached (a sender's: with only logits there is no receiver's)
        runs.readout[direction] = _readout_ok(model, target, min(l for l, _ in senders))
    use_readout = runs.readout[direction]
    if logits and not use_readout:
        raise InputError(
            "a path into the logits reads the last block's output out through the final norm and the "
            "unembedding, which is not what this model computes (a final soft-cap?)"
        )
    return use_readout


def _receiver_rows(
    model: Model,
    runs: TaskRuns,
    got: dict[str, Tensor],
    c: Component,
    s_layer: int,
    s_heads: list[int],
    r_layer: int,
    inp: str,
    receivers: list[tuple[int, int]],
    *,
    direction: str,
    use_readout: bool,
    max_rows: int,
) -> list[dict]:
    """One row per (receiver head at ``r_layer``, sender head) for input ``inp``, from the senders' pass ``got``."""
    n = runs.task.n
    units = {h: (h if inp == "q" else _kv_head(model, h)) for l, h in receivers if l == r_layer}
    uniq = sorted(set(units.values()))
    step = max(1, max_rows // (n * len(s_heads)))
    metric = {}
    for i in range(0, len(uniq), step):
        part = uniq[i : i + step]
        captured = got[f"blocks.{r_layer}.attn.hook_{inp}"]
        m = _receiver_metric(model, runs, r_layer, inp, part, captured, direction=direction, use_readout=use_readout)
        metric.update({u: m[j] for j, u in enumerate(part)})
    out = []
    for h, u in units.items():
        for j, s in enumerate(s_heads):
            out.append(
                dict(
                    component=c.name,
                    sender_layer=s_layer,
                    sender_head=s,
                    receiver_layer=r_layer,
                    receiver_head=h,
                    receiver_input=inp,
                    kv_head=u if inp != "q" else -1,
                    patched=metric[u][j * n : (j + 1) * n].tolist(),
                )
            )
    return out


def _logit_rows(
    model: Model, runs: TaskRuns, got: dict[str, Tensor], c: Component, s_layer: int, s_heads: list[int]
) -> list[dict]:
    """One row per sender head for the path into the logits, from the senders' pass ``got``."""
    n = runs.task.n
    final = got[f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"]
    with torch.no_grad():
        m = score_rows(runs.task, readout(model, final[:, -1])).float().cpu()
    return [
        dict(
            component=c.name,
            sender_layer=s_layer,
            sender_head=s,
            receiver_layer=model.cfg.n_layers,
            receiver_head=-1,
            receiver_input="logits",
            kv_head=-1,
            patched=m[j * n : (j + 1) * n].tolist(),
        )
        for j, s in enumerate(s_heads)
    ]


def path_sweep(
    model: Model,
    runs: TaskRuns,
    senders: Iterable[tuple[int, int]],
    receivers: Iterable[tuple[int, int]] = (),
    *,
    components: Iterable[str | Component] = ("head",),
    inputs: Iterable[str] = RECEIVER_INPUTS,
    logits: bool = False,
    direction: str = "denoise",
    positions: str = "all",
    frame: str = "patched",
    through_mlps: bool = True,
    max_rows: int = 256,
) -> list[dict]:
    """Patch each component of each sender ``(layer, head)`` (``head`` -1, or any, for an MLP component)
    only into each receiver ``(layer, head)``'s ``inputs`` at a later block, and into the logits with
    ``logits``. One row per (component, sender, receiver, input) with the per-prompt metric ``patched``
    (a list of ``n`` floats) and the :data:`PATH_COLUMNS`; pairs whose receiver is not after the sender
    are left out. ``runs``: made by :func:`path_runs` for these blocks."""
    comps = [get_component(c) for c in components]
    inputs = list(dict.fromkeys(inputs))
    senders, receivers, r_layers = _checked_path_args(
        model, runs, comps, inputs, senders, receivers, logits, through_mlps
    )
    use_readout = _path_readout(model, runs, direction, senders, logits)
    n, last = runs.task.n, model.cfg.n_layers if logits else max(r_layers)
    per = max(1, max_rows // n)
    out: list[dict] = []
    for c in comps:
        by_layer: dict[int, list[int]] = {}
        for layer, head in senders:
            by_layer.setdefault(layer, []).append(head)
        for s_layer, heads in sorted(by_layer.items()):
            later = [l for l in r_layers if l > s_layer]
            if not later and not logits:
                continue
            caps = [f"blocks.{l}.attn.hook_{i}" for l in later for i in inputs]
            if logits:
                caps.append(f"blocks.{model.cfg.n_layers - 1}.hook_resid_post")
            chunks = (
                [None]
                if c.scope == "layer"
                else [sorted(set(heads))[i : i + per] for i in range(0, len(set(heads)), per)]
            )
            for chunk in chunks:
                got = _sender_pass(
                    model,
                    runs,
                    c,
                    s_layer,
                    chunk,
                    caps,
                    last,
                    direction=direction,
                    positions=positions,
                    frame=frame,
                    through_mlps=through_mlps,
                )
                s_heads = [-1] if chunk is None else chunk
                for r_layer in later:
                    for inp in inputs:
                        out += _receiver_rows(
                            model,
                            runs,
                            got,
                            c,
                            s_layer,
                            s_heads,
                            r_layer,
                            inp,
                            receivers,
                            direction=direction,
                            use_readout=use_readout,
                            max_rows=max_rows,
                        )
                if logits:
                    out += _logit_rows(model, runs, got, c, s_layer, s_heads)
    return out


def path_effects(rows: list[dict], runs: TaskRuns, *, direction: str = "denoise", alpha: float = ALPHA) -> pd.DataFrame:
    """One row per path of :func:`path_sweep`'s ``rows``: the :data:`PATH_COLUMNS`, the normalised
    ``effect`` (:func:`.effects.effect`) with its Fieller interval over prompts, ``se``, ``p`` (one-sample
    t-test of the per-prompt numerators; the interval excludes 0 exactly when ``p < 0.05``), the
    Benjamini–Hochberg ``q`` over every path of the sweep (the family: every row of ``rows``, so a path's q
    depends on what else was swept), ``family_size`` and ``significant`` (``q < alpha``)."""
    clean, corrupted = runs.clean.metric.numpy(), runs.corrupted.metric.numpy()
    recs = []
    for r in rows:
        test = effect_test(r["patched"], clean, corrupted, direction)
        recs.append({**{k: r[k] for k in PATH_COLUMNS}, "direction": direction, **test, "n": len(r["patched"])})
    df = pd.DataFrame(recs, columns=[*PATH_COLUMNS, "direction", "effect", "ci_low", "ci_high", "se", "p", "n"])
    df["q"] = bh_qvalues(df["p"].to_numpy(dtype=float)) if len(df) else []
    df["family_size"] = len(df)
    df["significant"] = df["q"] < alpha
    return df
