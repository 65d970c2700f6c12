"""Single-pass interventions at the prompts' last token: rotate, attenuate, transplant or mix one part, and how much of
it is left later.

At state index ``layer`` (default the authors' single-pass layer ``max(1, int(0.15 L))``),
one forward per batch and edit, the edit at the last position of left-padded prompts (every
prompt's last token), against one clean forward per batch; the forwards stop at the last block
and only the last position goes through the unembedding (checked once against the model's
logits). Conditions (:data:`SINGLE_PASS`):

* ``D_rotate``, ``S_rotate``, ``F_top_rotate``, ``random_rotate``: the coordinates inside D,
  S, the top principal axes of F (as in the persistent ``F_top``) or a random subspace of
  D's rank (the authors' control, on the whole state) rotated by a seeded rotation,
  ``repeats`` rotations per prompt (seed ``seed + r n + i`` for repeat ``r`` of prompt ``i``);
* ``D_attenuate``, ``S_attenuate``, ``F_attenuate``: the part scaled by ``1 - alpha``;
* ``F_transplant``: F replaced by a donor prompt's F, rescaled to the recipient's ``||F||``;
  the donor is the prompt at the same place in the next group (the authors pair groups of
  one domain, which the prompt files do not label);
* ``F_mix``: F's coordinates signed-permuted, ``repeats`` permutations shared by all
  prompts (seed ``seed + r``), as the authors.

``mode="exact"``: each prompt's D and S with its own prediction direction projected out,
F their complement, donor and mixed vectors projected back into it and rescaled;
``"faithful"``: the shared bases and the authors' ``F = h - P - D - S`` with each part
projected on its own, no projection back.

Per (condition, prompt, repeat): ``KL(p_clean || p_edited)`` of the next token (nats, over
the whole vocabulary; the authors renormalise on the union of both top-2048 lists), whether
the argmax changed, and at every later state the angle between the clean and the edited
part (the edited subspace; F for the F conditions; 90° where either part is zero, as the
authors): how much of the edit the later layers undo.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..geometry.rotation import complement_part, rotation, signed_permutation
from ..hooks.resume import StopForward, readout
from ..hooks.subspace import ComplementEdit, SubspaceEdit
from ..models import Model
from .generation import left_pad
from .interventions import condition_bases

__all__ = [
    "SINGLE_PASS",
    "DEFAULT_SINGLE_PASS",
    "single_pass_layer",
    "next_group_donors",
    "single_pass",
    "single_pass_summary",
    "batch_order",
    "CLEAN_CACHE_BYTES",
]

SINGLE_PASS = (
    "D_rotate",
    "S_rotate",
    "F_top_rotate",
    "random_rotate",
    "D_attenuate",
    "S_attenuate",
    "F_attenuate",
    "F_transplant",
    "F_mix",
)
DEFAULT_SINGLE_PASS = ("D_rotate", "S_rotate", "F_top_rotate", "random_rotate", "F_attenuate", "F_mix", "F_transplant")
CLEAN_CACHE_BYTES = 2 * 2**30  # the clean next-token log-probabilities of every prompt, kept across conditions
OnCondition = Callable[[str, pd.DataFrame, pd.DataFrame], None]


def single_pass_layer(n_layers: int, fraction: float = 0.15) -> int:
    """The state index of the authors' single-pass interventions: ``max(1, int(fraction * L))``."""
    return max(1, min(n_layers, int(fraction * n_layers)))


def next_group_donors(groups: Sequence[str]) -> np.ndarray:
    """For each prompt, the prompt at the same place (cyclically) in the next group, groups in
    order of first appearance; a single group gives the next prompt of that group."""
    groups = list(groups)
    order = list(dict.fromkeys(groups))
    members = {g: [i for i, x in enumerate(groups) if x == g] for g in order}
    out = np.empty(len(groups), dtype=int)
    for i, g in enumerate(groups):
        place = members[g].index(i)
        if len(order) == 1:
            out[i] = members[g][(place + 1) % len(members[g])]
        else:
            nxt = members[order[(order.index(g) + 1) % len(order)]]
            out[i] = nxt[place % len(nxt)]
    return out


def _unit(u: Tensor) -> Tensor:
    return u / u.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(u.dtype).tiny)


class _Parts:
    """The per-prompt bases of one run and the part of a state that each condition edits."""

    def __init__(self, h: Tensor, u: Tensor, mode: str, seed: int):
        cb = condition_bases(h, u, ("D", "S", "F_top", "random"), mode=mode, seed=seed)
        self.bases = {"D": cb.bases["D"], "S": cb.bases["S"], "F_top": cb.bases["F_top"], "random": cb.bases["random"]}
        self.u = _unit(u.double())
        self.k_D, self.k_S = cb.pdsf.k_D, cb.pdsf.k_S

    def kept(self, rows: Tensor) -> tuple[Tensor, ...]:
        """The bases F is the complement of, for ``rows``: ``u`` as ``[b, d, 1]``, D, S."""
        return self.u[rows][:, :, None], self.bases["D"][rows], self.bases["S"][rows]

    def part(self, which: str, x: Tensor, rows: Tensor) -> Tensor:
        """The component of states ``x [b, d]`` (float64) that condition subspace ``which`` edits."""
        if which == "F":
            return complement_part(x[:, None], self.kept(rows))[:, 0]
        b = self.bases[which][rows]
        if which != "random":  # coordinates of the state with its own P removed, as the edits take them
            u = self.u[rows]
            x = x - (x * u).sum(-1, keepdim=True) * u
        return (b @ (b.transpose(1, 2) @ x[:, :, None]))[:, :, 0]

    def rank(self, which: str) -> int:
        return self.bases[which].shape[2] if which in self.bases else -1


def _angle(a: Tensor, b: Tensor) -> Tensor:
    """Degrees between rows (90 where either is zero), as ``2 atan2(|â - b̂|, |â + b̂|)``: exact near 0."""
    na, nb = a.norm(dim=-1, keepdim=True), b.norm(dim=-1, keepdim=True)
    tiny = torch.finfo(a.dtype).tiny
    ua, ub = a / na.clamp_min(tiny), b / nb.clamp_min(tiny)
    ang = torch.rad2deg(2 * torch.atan2((ua - ub).norm(dim=-1), (ua + ub).norm(dim=-1)))
    na, nb = na[..., 0], nb[..., 0]
    return torch.where((na > 0) & (nb > 0), ang, torch.full_like(ang, 90.0))


def _edit(
    cond: str,
    parts: _Parts,
    rows: Tensor,
    repeat: int,
    *,
    layer: int,
    alpha: float,
    f_donor: Tensor,
    n: int,
    d: int,
    seed: int,
    rotation_kind: str,
    mode: str,
):
    which, op = cond.rsplit("_", 1)
    if op == "rotate":
        basis = parts.bases[which][rows]
        k = basis.shape[2]
        rot = torch.stack([rotation(k, seed + repeat * n + int(i), rotation_kind) for i in rows])
        u = None if which == "random" else parts.u[rows].float()
        return SubspaceEdit(layer - 1, basis.float(), u=u, rotation=rot.float())
    if op == "attenuate" and which != "F":
        basis = parts.bases[which][rows]
        return SubspaceEdit(layer - 1, basis.float(), u=parts.u[rows].float(), factor=1.0 - alpha)
    kept = tuple(b.float() for b in parts.kept(rows))
    project = mode == "exact"
    if op == "attenuate":
        return ComplementEdit(layer - 1, kept, factor=1.0 - alpha)
    if op == "transplant":
        return ComplementEdit(layer - 1, kept, donor=f_donor[rows].float(), project=project)
    perm, signs = signed_permutation(d, seed + repeat)
    return ComplementEdit(
        layer - 1, kept, mix=(perm.expand(len(rows), d), signs.float().expand(len(rows), d)), project=project
    )


def _last_states(model, toks: Tensor, mask: Tensor, names: list[str], hooks, stop: bool) -> tuple[Tensor, Tensor]:
    """``(log p of the next token [b, vocab], states at the last position [len(names), b, d])``
    of one forward with ``hooks`` applied before the states are read; ``stop``: end the forward at
    the last block and read out the last position only (``names[-1]`` is the last block's output)."""
    store: dict[str, Tensor] = {}

    def grab(name: str):  # by the name asked for (the bridge's hooks carry their canonical names)
        def fn(x: Tensor, hook) -> None:
            store[name] = x[:, -1].detach()
            if stop and name == names[-1]:
                raise StopForward

        return fn

    device = next(model.parameters()).device
    with torch.inference_mode(), model.hooks(fwd_hooks=[*hooks, *[(nm, grab(nm)) for nm in names]]):
        try:
            logits = model(toks.to(device), attention_mask=mask.to(device))[:, -1]
        except StopForward:
            logits = readout(model, store[names[-1]])
    states = torch.stack([store[nm].double().cpu() for nm in names])
    return torch.log_softmax(logits.double(), -1).cpu(), states


def _readout_is_exact(model, lp_full: Tensor, final: Tensor) -> bool:
    """Whether the last position's log-probabilities of a full forward are the readout of the last
    block's output there (then the other forwards stop at the last block)."""
    param = next(model.parameters())
    with torch.inference_mode():
        got = torch.log_softmax(readout(model, final.to(param.device, param.dtype)).double(), -1).cpu()
    return bool(torch.allclose(got.exp(), lp_full.exp(), atol=1e-4))


def _check_single_pass(
    model: Model,
    prompts: Sequence,
    groups: Sequence[str],
    h: Tensor,
    layer: int,
    conditions: Sequence[str],
    repeats: int,
) -> None:
    """Raise on a layer out of range, an unknown or no condition, mismatched lengths or no repeat."""
    n_layers = model.cfg.n_layers
    if not 1 <= layer <= n_layers:
        raise InputError(f"layer {layer} out of range: states 1..{n_layers} can be edited")
    bad = [c for c in conditions if c not in SINGLE_PASS]
    if bad or not conditions:
        raise InputError(
            f"unknown single-pass condition {', '.join(map(repr, bad)) or '(none)'}; choose from {SINGLE_PASS}"
        )
    if len(prompts) != len(groups) or h.shape[0] != len(prompts):
        raise InputError(f"{len(prompts)} prompts, {len(groups)} groups and {h.shape[0]} states must match")
    if repeats < 1:
        raise InputError(f"repeats must be positive, got {repeats}")


class _CleanRuns:
    """Each batch's clean forward (``batch start -> (log p, states)``), kept across conditions when ``keep``;
    ``stop``: whether the forwards stop at the last block (decided by the first clean forward, a full one)."""

    def __init__(self, model: Model, names: list[str], keep: bool):
        self.model, self.names, self.keep = model, names, keep
        self.cache: dict[int, tuple[Tensor, Tensor]] = {}
        self.stop: bool | None = None

    def __call__(self, s: int, toks: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
        """The clean ``(log p [b, vocab], states [len(names), b, d])`` of the batch starting at prompt ``s``."""
        if s in self.cache:
            return self.cache[s]
        got = _last_states(self.model, toks, mask, self.names, [], bool(self.stop))
        if self.stop is None:  # the first clean forward is a full one: can the others skip most of the unembedding?
            self.stop = _readout_is_exact(self.model, got[0], got[1][-1])
            if self.stop:  # the clean and edited runs of a batch read out the same way (a no-op edit: KL 0 exactly)
                got = _last_states(self.model, toks, mask, self.names, [], True)
        if self.keep:
            self.cache[s] = got
        return got


def _edit_rows(
    cond: str, rows: Tensor, groups: Sequence[str], repeat: int, layer: int, rank: int, lp: tuple, ang: Tensor
) -> list[dict]:
    """One row per prompt of a batch's edit: KL, argmax change and angles (``lp``: clean and edited log p)."""
    lp_clean, lp_edit = lp
    kl = (lp_clean.exp() * (lp_clean - lp_edit)).sum(-1).clamp_min(0)
    return [
        {
            "condition": cond,
            "prompt": i,
            "group": groups[i],
            "repeat": repeat,
            "layer": layer,
            "rank": rank,
            "kl": float(kl[j]),
            "flipped": bool(lp_clean[j].argmax() != lp_edit[j].argmax()),
            "angle_at_edit": float(ang[0, j]),
            "angle_final": float(ang[-1, j]),
        }
        for j, i in enumerate(rows.tolist())
    ]


def _run_condition(
    model: Model,
    cond: str,
    prompts: Sequence[Int[Tensor, "pos"]],
    groups: Sequence[str],
    parts: _Parts,
    clean: _CleanRuns,
    states: list[int],
    *,
    repeats: int,
    batch_size: int,
    edit_kw: dict,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rows, mean angle per later state)`` of condition ``cond`` over every batch (``edit_kw``: :func:`_edit`'s)."""
    which_part, op = cond.rsplit("_", 1)
    every = torch.arange(len(prompts))
    rows_out, angle_sum = [], torch.zeros(len(states), dtype=torch.float64)
    for s in range(0, len(prompts), batch_size):
        rows = every[s : s + batch_size]
        toks, mask = left_pad(model, [prompts[int(i)] for i in rows])
        lp_clean, h_clean = clean(s, toks, mask)
        for r in range(repeats if op in ("rotate", "mix") else 1):
            e = _edit(cond, parts, rows, r, **edit_kw)
            lp_edit, h_edit = _last_states(model, toks, mask, clean.names, e.hooks(model), clean.stop)
            ang = torch.stack(
                [
                    _angle(parts.part(which_part, h_clean[j], rows), parts.part(which_part, h_edit[j], rows))
                    for j in range(len(states))
                ]
            )  # [states, b]
            angle_sum += ang.sum(1)
            lp = (lp_clean, lp_edit)
            rows_out += _edit_rows(cond, rows, groups, r, edit_kw["layer"], parts.rank(which_part), lp, ang)
    df = pd.DataFrame(rows_out)
    angles = pd.DataFrame(
        [{"condition": cond, "state": st, "angle_mean": float(angle_sum[j] / len(df))} for j, st in enumerate(states)]
    )
    return df, angles


def single_pass(
    model: Model,
    prompts: Sequence[Int[Tensor, "pos"]],
    groups: Sequence[str],
    h: Float[Tensor, "n d"],
    u: Float[Tensor, "n d"],
    *,
    layer: int,
    conditions: Sequence[str] = DEFAULT_SINGLE_PASS,
    mode: str = "exact",
    alpha: float = 0.5,
    repeats: int = 3,
    seed: int = 42,
    rotation_kind: str = "haar",
    batch_size: int = 16,
    on_condition: OnCondition | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(one row per condition, prompt and repeat; the mean angle per condition and later state)``
    for prompts with last-token states ``h [n, d]`` at state ``layer`` and directions ``u [n, d]``.

    One condition at a time over every batch (the clean forward of each batch is computed once
    and kept where the log-probabilities of all prompts fit in :data:`CLEAN_CACHE_BYTES`);
    ``on_condition(condition, rows, angles)`` is called as each condition finishes (a resume
    log). A condition's rows do not depend on the other conditions run with it; the rows come
    back in batch order (batch, condition, repeat, prompt)."""
    _check_single_pass(model, prompts, groups, h, layer, conditions, repeats)
    n, d = h.shape
    parts = _Parts(h, u, mode, seed)
    f_donor = parts.part("F", h.double(), torch.arange(n))[torch.as_tensor(next_group_donors(groups))]
    states = list(range(layer, model.cfg.n_layers + 1))
    names = [f"blocks.{s - 1}.hook_resid_post" for s in states]
    clean = _CleanRuns(model, names, keep=n * model.cfg.d_vocab * 8 <= CLEAN_CACHE_BYTES)
    edit_kw = dict(
        layer=layer, alpha=alpha, f_donor=f_donor, n=n, d=d, seed=seed, rotation_kind=rotation_kind, mode=mode
    )
    frames, angle_frames = [], []
    for cond in conditions:
        df, angles = _run_condition(
            model, cond, prompts, groups, parts, clean, states, repeats=repeats, batch_size=batch_size, edit_kw=edit_kw
        )
        if on_condition is not None:
            on_condition(cond, df, angles)
        frames.append(df)
        angle_frames.append(angles)
    return batch_order(pd.concat(frames, ignore_index=True), conditions, batch_size), pd.concat(
        angle_frames, ignore_index=True
    )


def batch_order(df: pd.DataFrame, conditions: Sequence[str], batch_size: int) -> pd.DataFrame:
    """Single-pass rows in the order of a batch-by-batch run: batch, condition (in ``conditions``'
    order), repeat, prompt."""
    rank = {c: i for i, c in enumerate(conditions)}
    keys = pd.DataFrame(
        {"b": df["prompt"] // batch_size, "c": df["condition"].map(rank), "r": df["repeat"], "p": df["prompt"]}
    )
    return df.loc[keys.sort_values(["b", "c", "r", "p"], kind="stable").index].reset_index(drop=True)


def single_pass_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per condition: mean KL with its standard error over prompts (repeats averaged first), the
    median, the share of argmax changes, and the mean angle at the edit and at the last state."""
    out = []
    for c, g in df.groupby("condition", sort=False):
        per_prompt = g.groupby("prompt")["kl"].mean()
        out.append(
            {
                "condition": c,
                "rank": int(g["rank"].iloc[0]),
                "n_prompts": len(per_prompt),
                "kl_mean": per_prompt.mean(),
                "kl_sem": per_prompt.std(ddof=1) / np.sqrt(len(per_prompt)) if len(per_prompt) > 1 else float("nan"),
                "kl_median": per_prompt.median(),
                "flip_pct": 100 * g["flipped"].mean(),
                "angle_at_edit": g["angle_at_edit"].mean(),
                "angle_final": g["angle_final"].mean(),
            }
        )
    return pd.DataFrame(out)
