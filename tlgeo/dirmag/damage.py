"""LM damage under L2-matched perturbations: magnitude vs angle, per ``delta`` and seed.

The sentences are the reference notebook's: lines of the WikiText test text of
30–300 characters that contain a '.' and are not headers, each cut to 64 tokens
(:func:`wikitext_sentences`). The paper read WikiText-103's test split; the
WikiText-2 test text here holds the same articles, and the filter keeps the
same 281 lines. Tokens are the model's own (``to_tokens``, with BOS where the
model prepends one; Pythia's tokenizer in the notebook does not).

A sentence's loss is its mean next-token cross-entropy; a run's loss is the
mean over sentences (as the notebook), and damage = perturbed − clean. The
clean pass is made once; every perturbed pass resumes from the cached residual
of the first perturbed block (:func:`tlgeo.hooks.resume.resume_forward`), so it
costs only the blocks from there on. With ``log_path`` each (kind, delta, seed)
row is written as it is measured and a rerun skips it.
"""

from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np
import pandas as pd

from ..data import load_text
from ..errors import InputError
from ..runner.results import IDENTITY
from .engine import PAPER_DELTAS, SweepGrid, perturbed_scores
from .paper import PAPER_DAMAGE

__all__ = [
    "PAPER_DELTAS",
    "PAPER_DAMAGE",
    "wikitext_sentences",
    "corpus_sentences",
    "lm_damage",
    "damage_table",
    "damage_summary",
    "token_damage",
]

KEY = (
    "kind",
    "delta",
    "relative",
    "seed",
    "mode",
    "flip",
    "layers",
    "n_sentences",
    "max_tokens",
    "text_sha1",
    "tokens",
)


def corpus_sentences(
    corpus: str, limit: int | None = None, *, tail_frac: float = 0.01, min_chars: int = 30, max_chars: int = 300
) -> list[str]:
    """Sentences of the last ``tail_frac`` of a corpus (``tlgeo.data`` name or file): its
    whitespace-normalised text split after '.', '!' or '?', kept when ``min_chars < len < max_chars``.

    ``tlgeo.train`` holds out the last 1 % of each source for validation, so the default tail is
    text a model trained here has not seen (up to the char/token difference at the boundary)."""
    import re

    if not 0 < tail_frac <= 1:
        raise InputError(f"tail_frac must be in (0, 1], got {tail_frac}")
    text = load_text(corpus)
    tail = " ".join(text[int(len(text) * (1 - tail_frac)) :].split())
    out = [t for t in re.split(r"(?<=[.!?])\s+", tail)[1:] if min_chars < len(t) < max_chars]  # [0]: cut mid-way
    if not out:
        raise InputError(f"no sentences of {min_chars}-{max_chars} characters in the last {tail_frac:g} of {corpus!r}")
    return out[:limit] if limit is not None else out


def wikitext_sentences(
    limit: int | None = None, *, corpus: str = "wikitext2", min_chars: int = 30, max_chars: int = 300
) -> list[str]:
    """The notebook's sentence set: lines with ``min_chars < len < max_chars``, a '.', no '=' header."""
    lines = (line.strip() for line in load_text(corpus).splitlines())
    out = [t for t in lines if min_chars < len(t) < max_chars and not t.startswith("=") and "." in t]
    return out[:limit] if limit is not None else out


def lm_damage(
    model,
    sentences: Sequence[str],
    grid: SweepGrid | None = None,
    *,
    max_tokens: int = 64,
    batch_size: int = 16,
    log_path: str | os.PathLike | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Loss damage of each perturbation of ``grid`` (default :class:`SweepGrid`), one row each.

    Faithful mode scores one sentence per forward, as the notebook (its bisection
    averages over the tensor's tokens). Columns: the perturbation, ``loss,
    clean_loss, damage``, ``delta_over_norm`` (delta / median clean ||h|| at the
    perturbed layers; the fraction itself when ``relative``), ``median_norm``,
    ``clipped_share`` (states not moved as asked), ``flipped_share`` (magnitude
    shrinks past 0), ``n_sentences, n_tokens, wall_s``.
    """
    grid = grid or SweepGrid()
    clean, settings = grid.sweep(model, sentences, max_tokens=max_tokens, batch_size=batch_size)
    settings["max_tokens"] = max_tokens
    base = float(clean.scores.mean())

    def measure(pert) -> dict:
        stats: list[dict] = []
        loss = float(perturbed_scores(model, clean, pert, stats).mean())
        return {
            "loss": loss,
            "clean_loss": base,
            "damage": loss - base,
            "median_norm": clean.median_norm,
            "clipped_share": _share(stats, "n_clipped"),
            "flipped_share": _share(stats, "n_flipped"),
            "n_tokens": clean.n_tokens,
        }

    df = pd.DataFrame(grid.run(model, clean, measure, key=KEY, settings=settings, log_path=log_path, progress=progress))
    df["delta_over_norm"] = df["delta"] if grid.relative else df["delta"] / clean.median_norm
    return df


def _share(stats: list[dict], what: str) -> float:
    """Share of the perturbed token states (all layers and forwards) counted in ``what``."""
    return sum(s[what] for s in stats) / max(sum(s["n_tokens"] for s in stats), 1)


def damage_summary(df: pd.DataFrame | None) -> pd.DataFrame | None:
    """:func:`damage_table` of each run's rows (rows of one run share the model's identity and every
    :data:`KEY` setting but ``kind``, ``delta`` and ``seed``), with those columns first."""
    if df is None or df.empty:
        return None
    df = df.assign(
        **{
            c: df[c].map(lambda v: json.dumps(list(v)) if isinstance(v, (list, tuple)) else v)
            for c in ("layers",)
            if c in df
        }
    )
    run_key = [c for c in (*IDENTITY, *KEY) if c in df.columns and c not in ("kind", "delta", "seed")]
    parts = []
    for k, g in df.groupby(run_key, dropna=False, sort=False) if run_key else [((), df)]:
        t = damage_table(g)
        for c, v in zip(run_key, k if isinstance(k, tuple) else (k,)):
            t.insert(len([x for x in run_key if x in t.columns]), c, v)
        parts.append(t)
    return pd.concat(parts, ignore_index=True)


def damage_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per ``delta``: mean and sd over seeds of each kind's damage, and the notebook's
    ratio ``angle / (magnitude + 1e-8)``; the paper's Pythia-410M values where it has them."""
    g = df.groupby(["delta", "kind"])["damage"].agg(["mean", "std"]).unstack("kind")
    out = pd.DataFrame(index=g.index)
    for kind in ("magnitude", "angle"):
        if ("mean", kind) in g.columns:
            out[f"{kind}_damage"] = g[("mean", kind)]
            out[f"{kind}_sd"] = g[("std", kind)].fillna(0.0)
    if {"magnitude_damage", "angle_damage"} <= set(out.columns):
        out["ratio_angle_over_magnitude"] = out["angle_damage"] / (out["magnitude_damage"] + 1e-8)
    out["delta_over_norm"] = df.groupby("delta")["delta_over_norm"].first()
    out["n_seeds"] = df.groupby("delta")["seed"].nunique()
    relative = bool(df["relative"].iloc[0]) if "relative" in df else False
    paper = {} if relative else PAPER_DAMAGE
    out["paper_magnitude"] = [paper.get(d, (np.nan, np.nan))[0] for d in out.index]
    out["paper_angle"] = [paper.get(d, (np.nan, np.nan))[1] for d in out.index]
    return out.reset_index()


def token_damage(model, text: str, perturbations, *, max_tokens: int = 64) -> pd.DataFrame:
    """Per-token loss change of one text under each perturbation (full forwards, no cache).

    ``perturbations``: :class:`tlgeo.hooks.perturbation.Perturbation` objects. One row per
    predicted token: ``position, token, clean_nll`` and ``<kind>_change`` (perturbed − clean
    NLL of that token) per perturbation kind."""
    import torch
    import torch.nn.functional as F

    toks = model.to_tokens(text)[:, :max_tokens]
    if toks.shape[1] < 2:
        raise InputError(f"text {text!r} has fewer than 2 tokens: nothing to predict")

    def nll(hooks) -> np.ndarray:
        with torch.inference_mode():
            logits = model.run_with_hooks(toks, fwd_hooks=hooks) if hooks else model(toks)
        return F.cross_entropy(logits[0, :-1].float(), toks[0, 1:].to(logits.device), reduction="none").cpu().numpy()

    clean = nll([])
    names = model.to_str_tokens(toks[0])[1:]
    out = pd.DataFrame({"position": np.arange(1, toks.shape[1]), "token": names, "clean_nll": clean})
    for p in perturbations:
        out[f"{p.kind}_change"] = nll(p.hooks(model)) - clean
    return out
