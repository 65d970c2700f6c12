"""Rotations inside D, S, the top of F, or a random subspace: in one forward, and persistently during generation.

Bases are fitted at one state index ``s`` (the authors: ``int(0.7 L)``) on the prompts'
last-token states, and the edit acts on the output of block ``s - 1`` (which is ``h_s``).

Conditions (:data:`CONDITIONS`):

* ``D``, ``S``: the PDSF subspaces (ranks as fitted);
* ``F_top``: the top principal axes of the F parts over the prompts, rank ``round(PR)``
  clipped to ``[2, 64]`` and ``n - 1`` (the authors' F-topK);
* ``F_dynamic``: the dynamic subspace of F along the unedited continuations
  (:func:`tlgeo.pdsf.dynamics.f_dynamics`, the authors' F-dynamic; they rotate it with one
  rotation shared by all prompts and without the KV cache, so only the current position is
  edited: here it is edited like the others);
* ``random``: a random subspace of D's rank (seed 42, shared), the authors' control.

``mode="exact"``: each prompt's D, S and F-top bases with its own prediction direction
(and the earlier parts) projected out, so nothing else moves; ``"faithful"``: the shared
bases, coordinates of the P-removed state. Each prompt ``i`` gets its own rotation of seed
``seed + i``, the same at every step (Haar-uniform, or the authors' QR with ``rotation="qr"``).

:func:`persistent_rotations` generates the unedited and edited greedy continuations
(KV cache, the edit at the position being generated) and returns one row per
(condition, prompt): divergence step, immediate divergence, the teacher-forced KL per step,
and the frame-shift proxy (:func:`frame_shifts`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..geometry.rotation import random_basis, rotation
from ..geometry.subspaces import PDSFBasis, fit_pdsf, own_bases, pca_basis, split_pdsf
from ..hooks.subspace import SubspaceEdit
from ..models import Model
from .generation import KL_CACHE_BYTES, divergence_step, greedy_continuations_each, teacher_forced_kl

__all__ = [
    "CONDITIONS",
    "ConditionBases",
    "condition_bases",
    "rotation_edit",
    "persistent_rotations",
    "frame_shifts",
    "frame_shift_base_rate",
    "default_layer",
    "divergence_summary",
]

CONDITIONS = ("D", "S", "F_top", "F_dynamic", "random")
F_BOUNDS = (2, 64)


def default_layer(n_layers: int, fraction: float = 0.7) -> int:
    """The state index the authors intervene at: ``int(fraction * L)`` (at least 1)."""
    return max(1, min(n_layers, int(fraction * n_layers)))


class ConditionBases:
    """Per-prompt bases ``[n, d, k]`` of each condition, and the fitted PDSF basis."""

    def __init__(self, bases: dict[str, Tensor], pdsf: PDSFBasis, u: Tensor, mode: str):
        self.bases, self.pdsf, self.u, self.mode = bases, pdsf, u, mode

    def rank(self, condition: str) -> int:
        return self.bases[condition].shape[2]


def _orth_against(basis: Tensor, others: Tensor) -> Tensor:
    """Per row: ``basis [d, k]`` with the columns of ``others [n, d, m]`` projected out, re-orthonormalised."""
    b = basis[None].expand(others.shape[0], *basis.shape)
    b = b - others @ (others.transpose(1, 2) @ b)
    q, _ = torch.linalg.qr(b)
    return q


def condition_bases(
    h: Float[Tensor, "n d"],
    u: Float[Tensor, "n d"],
    conditions: Sequence[str] = CONDITIONS,
    *,
    mode: str = "exact",
    k_D: int | None = None,
    k_S: int | None = None,
    seed: int = 42,
    f_dynamic: Float[Tensor, "d k"] | None = None,
) -> ConditionBases:
    """The bases of ``conditions`` for prompts with states ``h [n, d]`` and directions ``u [n, d]``;
    ``F_dynamic`` needs its basis ``f_dynamic [d, k]`` (:func:`tlgeo.pdsf.dynamics.f_dynamics`)."""
    bad = [c for c in conditions if c not in CONDITIONS]
    if bad or not conditions:
        raise InputError(f"unknown subspace {', '.join(map(repr, bad)) or '(none)'}; choose from {CONDITIONS}")
    if "F_dynamic" in conditions and f_dynamic is None:
        raise InputError("the F_dynamic condition needs the dynamic basis of F (f_dynamic, from f_dynamics)")
    h, u = h.double(), u.double()
    n, d = h.shape
    basis = fit_pdsf(h, u, k_D=k_D, k_S=k_S, mode=mode)
    parts = split_pdsf(h, u, basis)
    if mode == "exact":
        d_own, s_own = own_bases(u, basis)
    else:
        d_own, s_own = basis.D[None].expand(n, -1, -1), basis.S[None].expand(n, -1, -1)
    out: dict[str, Tensor] = {}
    for c in conditions:
        if c == "D":
            out[c] = d_own
        elif c == "S":
            out[c] = s_own
        elif c in ("F_top", "F_dynamic"):
            if c == "F_top":
                f_basis, _ = pca_basis(parts["F"], None, bounds=(F_BOUNDS[0], min(F_BOUNDS[1], n - 1)))
            else:
                f_basis = f_dynamic.double()
            if mode == "exact":
                out[c] = _orth_against(f_basis, torch.cat([u[:, :, None], d_own, s_own], 2))
            else:
                out[c] = f_basis[None].expand(n, -1, -1)
        else:
            out[c] = random_basis(d, basis.k_D, seed)[None].expand(n, -1, -1)
    return ConditionBases(out, basis, u, mode)


def rotation_edit(cb: ConditionBases, condition: str, layer: int, seed: int = 42, kind: str = "haar"):
    """``edit(rows, prompt_len)`` for :func:`~tlgeo.pdsf.generation.greedy_continuations`: prompt ``i``'s
    coordinates in ``condition``'s basis rotated by its own rotation (seed ``seed + i``) at state
    ``layer``, i.e. the output of block ``layer - 1``."""
    rots = {}

    def fn(rows: np.ndarray, prompt_len: int) -> SubspaceEdit:
        b = cb.bases[condition][torch.as_tensor(rows)]
        k = b.shape[2]
        for i in rows:
            if int(i) not in rots:
                rots[int(i)] = rotation(k, seed + int(i), kind)
        r = torch.stack([rots[int(i)] for i in rows])
        u = None if condition == "random" else cb.u[torch.as_tensor(rows)]  # the authors' control: the full h
        return SubspaceEdit(layer - 1, b.float(), u=None if u is None else u.float(), rotation=r.float())

    return fn


def _tfidf(texts_base: Sequence[str]):
    from sklearn.feature_extraction.text import TfidfVectorizer

    try:
        return TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"(?u)\b\w+\b").fit(
            list(texts_base)
        )
    except ValueError:  # no word at all in the continuations (e.g. a tiny random model)
        return None


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-12)


def frame_shifts(texts_base: Sequence[str], texts_edit: Sequence[str], groups: Sequence[str]) -> np.ndarray:
    """The frame-shift proxy: edited continuation ``i`` is shifted when its TF-IDF vector (word
    unigrams and bigrams, fitted on the unedited continuations) is closer by cosine to another
    group's centroid of unedited continuations than to its own group's, prompt ``i``'s own
    unedited continuation left out (it shares the edited one's text up to the divergence).
    Lexical only: it sees a change of topic or register, not of meaning.
    ``frame_shifts(base, base, groups)`` is its base rate: how often it fires with no edit."""
    groups = np.asarray(groups)
    if len(texts_edit) != len(texts_base) or len(groups) != len(texts_base):
        raise InputError(
            f"{len(texts_base)} unedited and {len(texts_edit)} edited continuations and {len(groups)} groups must match"
        )
    vec = _tfidf(texts_base)
    if vec is None:  # none is shifted
        return np.zeros(len(texts_edit), dtype=bool)
    base = vec.transform(list(texts_base)).toarray()
    names = list(np.unique(groups))
    sums = {g: base[groups == g].sum(0) for g in names}
    counts = {g: int((groups == g).sum()) for g in names}
    e = _unit_rows(vec.transform(list(texts_edit)).toarray())
    out = np.zeros(len(texts_edit), dtype=bool)
    for i, g in enumerate(groups):
        cents = [(sums[h] - base[i]) / max(counts[h] - 1, 1) if h == g else sums[h] / counts[h] for h in names]
        out[i] = names[int((e[i] @ _unit_rows(np.stack(cents)).T).argmax())] != g
    return out


def frame_shift_base_rate(texts_base: Sequence[str], groups: Sequence[str]) -> float:
    """The share of unedited continuations :func:`frame_shifts` flags (each against its group's
    other continuations): the proxy's rate with no edit at all."""
    return float(frame_shifts(texts_base, texts_base, groups).mean())


def persistent_rotations(
    model: Model,
    prompts: Sequence[Int[Tensor, "pos"]],
    groups: Sequence[str],
    h: Float[Tensor, "n d"],
    u: Float[Tensor, "n d"],
    *,
    layer: int,
    conditions: Sequence[str] = CONDITIONS,
    mode: str = "exact",
    max_new_tokens: int = 64,
    batch_size: int = 16,
    seed: int = 42,
    rotation_kind: str = "haar",
    kl: bool = True,
    baseline: Int[Tensor, "n new_tokens"] | None = None,
    f_dynamic: Float[Tensor, "d k"] | None = None,
    kl_cache: dict | None = None,
    progress: bool = False,
) -> tuple[pd.DataFrame, dict[str, Tensor]]:
    """One row per (condition, prompt), and the continuations (``"base"`` and each condition);
    ``F_dynamic`` needs ``f_dynamic`` (and so the unedited continuations it was fitted on);
    ``kl_cache``: the clean teacher-forced log-probabilities, kept across calls (a dict; one is made for
    several conditions where they fit in :data:`~tlgeo.pdsf.generation.KL_CACHE_BYTES`). Every condition's
    continuations (and the unedited ones, without ``baseline``) come from one generation per batch of prompts
    (:func:`~tlgeo.pdsf.generation.greedy_continuations_each`); then the KL, condition by condition."""
    if not 1 <= layer <= model.cfg.n_layers:
        raise InputError(f"layer {layer} out of range: states 1..{model.cfg.n_layers} can be edited")
    if len(prompts) != len(groups) or h.shape[0] != len(prompts):
        raise InputError(f"{len(prompts)} prompts, {len(groups)} groups and {h.shape[0]} states must match")
    cb = condition_bases(h, u, conditions, mode=mode, seed=seed, f_dynamic=f_dynamic)
    fns = {c: rotation_edit(cb, c, layer, seed, rotation_kind) for c in conditions}
    edits = ([] if baseline is not None else [None]) + [fns[c] for c in conditions]
    got = greedy_continuations_each(model, prompts, edits, max_new_tokens, batch_size=batch_size)
    base = baseline if baseline is not None else got.pop(0)
    gens = {"base": base, **dict(zip(conditions, got))}
    tok = model.tokenizer
    base_text = [tok.decode(t) for t in base]
    fits = len(prompts) * max_new_tokens * model.cfg.d_vocab * 4 <= KL_CACHE_BYTES
    if kl_cache is None and len(conditions) > 1 and fits:
        kl_cache = {}
    rows = []
    it = conditions
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(conditions, desc="persistent rotations", leave=False)
    for c in it:
        gen = gens[c]
        shifted = frame_shifts(base_text, [tok.decode(t) for t in gen], groups)
        kls = (
            teacher_forced_kl(model, prompts, base, fns[c], batch_size=batch_size, clean_cache=kl_cache) if kl else None
        )
        for i in range(len(prompts)):
            step = divergence_step(base[i], gen[i])
            rows.append(
                {
                    "condition": c,
                    "prompt": i,
                    "group": groups[i],
                    "rank": cb.rank(c),
                    "layer": layer,
                    "divergence_step": step,
                    "identical": step is None,
                    "immediate": step == 0,
                    "frame_shift": bool(shifted[i]),
                    **(
                        {"kl_first": float(kls[i, 0]), "kl_mean": float(kls[i].mean()), "kl_steps": kls[i].tolist()}
                        if kls is not None
                        else {}
                    ),
                }
            )
    return pd.DataFrame(rows), gens


def divergence_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per condition: immediate-divergence rate (with its 95 % Wilson CI, ``immediate_ci_low`` / ``_high``,
    percent) and mean / median first divergence over the prompts whose continuation changed (the authors'
    convention), the share unchanged, frame shifts, KL."""
    from ..stats.multiple import proportion_ci

    out = []
    for c, g in df.groupby("condition", sort=False):
        changed = g[~g["identical"].astype(bool)]
        k = int(changed["immediate"].astype(bool).sum())
        low, high = proportion_ci(k, len(changed))
        out.append(
            {
                "condition": c,
                "rank": int(g["rank"].iloc[0]),
                "n": len(g),
                "unchanged_pct": 100 * g["identical"].mean(),
                "immediate_pct": 100 * changed["immediate"].mean() if len(changed) else 0.0,
                "immediate_ci_low": 100 * low,
                "immediate_ci_high": 100 * high,
                "mean_first_divergence": changed["divergence_step"].mean() if len(changed) else float("nan"),
                "median_first_divergence": changed["divergence_step"].median() if len(changed) else float("nan"),
                "frame_shift_pct": 100 * g["frame_shift"].mean(),
                **({"kl_first": g["kl_first"].mean(), "kl_mean": g["kl_mean"].mean()} if "kl_first" in g else {}),
            }
        )
    return pd.DataFrame(out)
