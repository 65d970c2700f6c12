"""F during generation: its static part (shared by every step of a prompt) and its dynamic part, per layer.

Along each prompt's unedited greedy continuation (teacher-forced, one forward per batch: the
state at the position that generates step ``t`` is the state of step ``t`` of the
generation), the F part ``F_t`` of the last-position state at every layer, with the PDSF
bases fitted on the prompts' last-token states at that layer. ``anchor="prompt"``: every
step's P is the prompt's own prediction direction (the authors keep it fixed);
``"step"``: the direction of the token generated at that step.

Per prompt the static part is the mean over steps ``F̄`` and the dynamic part ``F_t - F̄``;
``||F̄||² + mean_t ||F_t - F̄||² = mean_t ||F_t||²``, so the two shares add up to 1. The
dynamic subspace at a layer is the top of the within-prompt temporal covariance averaged
over prompts, rank ``round(PR)`` clipped to ``[2, 64]`` (the authors' F-dynamic basis); its
participation ratio is reported per layer for widths up to 2048 (a ``d x d`` covariance each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..geometry.rotation import complement_part
from ..geometry.subspaces import fit_pdsf, own_bases, participation_ratio
from ..models import Model
from .generation import left_pad

__all__ = ["FDynamics", "f_dynamics", "dynamic_basis"]

DYNAMIC_BOUNDS = (2, 64)
MAX_COV_WIDTH = 2048


@dataclass
class FDynamics:
    """``layers``: one row per state index (energies and shares, means over prompts);
    ``steps``: ``cos(F_t, F_0)`` per step at each layer; ``basis``: the dynamic subspace at
    ``basis_layer`` ``[d, k]`` (``None`` when not asked)."""

    layers: pd.DataFrame
    steps: pd.DataFrame
    basis: Tensor | None
    basis_layer: int | None


def dynamic_basis(
    cov: Float[Tensor, "d d"], bounds: tuple[int, int] = DYNAMIC_BOUNDS
) -> tuple[Float[Tensor, "d k"], float]:
    """``(top eigenvectors of a covariance [d, k], its participation ratio)``, ``k = round(PR)``
    clipped to ``bounds`` and ``d``."""
    ev, vec = torch.linalg.eigh(cov.double())
    ev, vec = ev.flip(0).clamp_min(0), vec.flip(1)
    pr = float(participation_ratio(ev))
    k = int(min(max(round(pr), bounds[0]), bounds[1], cov.shape[0]))
    return vec[:, :k], pr


def _f_parts(x: Tensor, u: Tensor, basis, mode: str) -> Tensor:
    """F of states ``x [b, T, d]`` with prediction directions ``u [b, d]`` (or ``[b, T, d]``)."""
    b, t, d = x.shape
    if u.ndim == 3:  # one direction per step: treat every step as its own row
        return _f_parts(x.reshape(b * t, 1, d), u.reshape(b * t, d), basis, mode).reshape(b, t, d)
    u = u / u.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(u.dtype).tiny)
    if mode == "exact":
        d_b, s_b = own_bases(u, basis)
    else:
        d_b, s_b = basis.D[None].expand(b, -1, -1), basis.S[None].expand(b, -1, -1)
    return complement_part(x, (u[:, :, None], d_b, s_b))


def _checked_layers(
    anchor: str,
    continuations: Tensor,
    prompt_states: Tensor,
    u_steps: Tensor | None,
    layers: Sequence[int] | None,
    basis_layer: int | None,
) -> list[int]:
    """The state indices to split (default ``1..L``); raise on a bad anchor, steps, layers or basis layer."""
    if anchor not in ("prompt", "step"):
        raise InputError(f"anchor must be 'prompt' or 'step', got {anchor!r}")
    if anchor == "step" and (u_steps is None or u_steps.shape[:2] != continuations.shape):
        raise InputError("anchor='step' needs u_steps [n, T, d], one direction per generated token")
    n, steps = continuations.shape
    if steps < 2:
        raise InputError(f"the static/dynamic split needs at least 2 generated steps, got {steps}")
    n_layers = prompt_states.shape[0] - 1
    layers = list(range(1, n_layers + 1)) if layers is None else list(layers)
    if any(not 0 <= l <= n_layers for l in layers) or (basis_layer is not None and basis_layer not in layers):
        raise InputError(
            f"layers must be state indices 0..{n_layers} (basis_layer among them), got {layers}, "
            f"basis_layer {basis_layer}"
        )
    return layers


def _step_states(model: Model, toks: Tensor, mask: Tensor, cont: Tensor, names: set[str]) -> dict[str, Tensor]:
    """Per hook name, the float64 states ``[b, T, d]`` at the positions that generate each step of ``cont [b, T]``
    (teacher-forced after the left-padded prompts ``toks``)."""
    t0, steps = toks.shape[1], cont.shape[1]
    seq = torch.cat([toks, cont], 1)
    m = torch.cat([mask, torch.ones(len(cont), steps, dtype=torch.long)], 1)
    store: dict[str, Tensor] = {}

    def grab(name: str):  # by the name asked for (the bridge's hooks carry canonical names)
        def fn(x: Tensor, hook) -> None:
            store[name] = x[:, t0 - 1 : t0 - 1 + steps].detach().double().cpu()

        return fn

    device = next(model.parameters()).device
    with torch.inference_mode(), model.hooks(fwd_hooks=[(nm, grab(nm)) for nm in names]):
        model(seq.to(device), attention_mask=m.to(device))
    return store


def _accumulate(x: Tensor, f: Tensor, acc: dict, cos_sum: Tensor, cov: Tensor | None) -> None:
    """Add a batch's energies (``acc``), ``cos(F_t, F_0)`` (``cos_sum [T]``) and temporal covariance of F's
    dynamic part (``cov [d, d]``, where kept) at one layer, from states ``x`` and their F ``f`` ``[b, T, d]``."""
    mean = f.mean(1, keepdim=True)
    dyn = f - mean
    e_static, e_dyn = (mean[:, 0] ** 2).sum(-1), (dyn**2).sum(-1).mean(1)
    e_f = e_static + e_dyn
    tiny = torch.finfo(torch.float64).tiny
    acc["static"] += float(e_static.sum())
    acc["dynamic"] += float(e_dyn.sum())
    acc["f"] += float(e_f.sum())
    acc["state"] += float((x**2).sum(-1).mean(1).sum())
    acc["static_share"] += float(torch.where(e_f > 0, e_static / e_f.clamp_min(tiny), torch.ones_like(e_f)).sum())
    nf = f.norm(dim=-1)
    cos = (f * f[:, :1]).sum(-1) / (nf * nf[:, :1]).clamp_min(tiny)
    cos_sum += torch.where((nf > 0) & (nf[:, :1] > 0), cos, torch.zeros_like(cos)).sum(0)
    if cov is not None:
        cov += torch.einsum("btd,bte->de", dyn, dyn) / (f.shape[1] - 1)


def _layer_rows(layers: list[int], sums: dict, cos_sum: dict, cov: dict, bases: dict, n: int) -> tuple[list, list]:
    """``(one row per layer, one row per layer and step)``: the accumulated sums as means over ``n`` prompts."""
    rows_out, step_rows = [], []
    for l in layers:
        acc = sums[l]
        pr = dynamic_basis(cov[l] / n)[1] if l in cov else float("nan")
        rows_out.append(
            {
                "layer": l,
                "static_share": acc["static_share"] / n,
                "static_energy": acc["static"] / n,
                "dynamic_energy": acc["dynamic"] / n,
                "f_share_of_state": acc["f"] / max(acc["state"], torch.finfo(torch.float64).tiny),
                "dynamic_pr": pr,
                "k_D": bases[l].k_D,
                "k_S": bases[l].k_S,
            }
        )
        step_rows += [{"layer": l, "step": t, "cos_to_first": float(cos_sum[l][t] / n)} for t in range(len(cos_sum[l]))]
    return rows_out, step_rows


def f_dynamics(
    model: Model,
    prompts: Sequence[Int[Tensor, "pos"]],
    continuations: Int[Tensor, "n steps"],
    prompt_states: Float[Tensor, "states n d"],
    u: Float[Tensor, "n d"],
    *,
    layers: Sequence[int] | None = None,
    mode: str = "exact",
    anchor: str = "prompt",
    basis_layer: int | None = None,
    batch_size: int = 16,
    u_steps: Float[Tensor, "n steps d"] | None = None,
) -> FDynamics:
    """The static/dynamic split of F along ``continuations [n, T]`` of ``prompts``; bases fitted on
    ``prompt_states [L + 1, n, d]`` (the prompts' last-token states) with directions ``u [n, d]``.
    ``anchor="step"`` needs ``u_steps [n, T, d]`` (the directions of the generated tokens)."""
    layers = _checked_layers(anchor, continuations, prompt_states, u_steps, layers, basis_layer)
    n, steps = continuations.shape
    bases = {l: fit_pdsf(prompt_states[l].double(), u.double(), mode=mode) for l in layers}
    names = {l: "blocks.0.hook_resid_pre" if l == 0 else f"blocks.{l - 1}.hook_resid_post" for l in layers}
    sums = {l: {"static": 0.0, "dynamic": 0.0, "f": 0.0, "state": 0.0, "static_share": 0.0} for l in layers}
    cos_sum = {l: torch.zeros(steps, dtype=torch.float64) for l in layers}
    d = prompt_states.shape[2]
    # the temporal covariance of every layer (its PR per layer) up to d = 2048, else only at basis_layer
    cov = {l: torch.zeros(d, d, dtype=torch.float64) for l in layers if d <= MAX_COV_WIDTH or l == basis_layer}
    for s in range(0, n, batch_size):
        rows = torch.arange(s, min(s + batch_size, n))
        toks, mask = left_pad(model, [prompts[int(i)] for i in rows])
        store = _step_states(model, toks, mask, continuations[rows], set(names.values()))
        for l in layers:
            x = store[names[l]]  # [b, T, d]
            f = _f_parts(x, u_steps[rows].double() if anchor == "step" else u[rows].double(), bases[l], mode)
            _accumulate(x, f, sums[l], cos_sum[l], cov.get(l))
    rows_out, step_rows = _layer_rows(layers, sums, cos_sum, cov, bases, n)
    basis = dynamic_basis(cov[basis_layer] / n)[0] if basis_layer is not None else None
    meta = {"mode": mode, "anchor": anchor, "steps": steps, "n_prompts": n}
    return FDynamics(pd.DataFrame(rows_out).assign(**meta), pd.DataFrame(step_rows).assign(**meta), basis, basis_layer)
