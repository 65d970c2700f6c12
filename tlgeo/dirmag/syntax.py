"""Syntax under L2-matched perturbations: BLiMP subject–verb agreement accuracy per ``delta``.

Both sentences of every pair are scored whole (total NLL) clean once and then
under each perturbation from the cached prefix (:mod:`.engine`); a pair is
right when the good sentence is more probable. One row per (kind, delta, seed,
paradigm) plus the pooled row, with the clean accuracy beside it. The paper:
Pythia-410M, 200 items, clean 89.5 %; at delta = 5 magnitude 69.1 % vs angle
87.9 %, at 10 56.0 vs 77.1, at 15 53.5 vs 67.4.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

import pandas as pd

from ..errors import InputError
from ..evals.blimp import AGREEMENT, MinimalPair, accuracy_rows, load_blimp, pair_correct
from .engine import SweepGrid, perturbed_scores
from .paper import PAPER_BLIMP

__all__ = ["PAPER_BLIMP", "agreement_pairs", "blimp_damage"]

KEY = ("kind", "delta", "relative", "seed", "mode", "flip", "layers", "n_sentences", "text_sha1", "tokens")


def agreement_pairs(limit: int | None = None, paradigms: Iterable[str] = AGREEMENT) -> list[MinimalPair]:
    """The first ``limit`` pairs of each agreement paradigm."""
    return [p for name in paradigms for p in load_blimp(name, limit)]


def blimp_damage(
    model,
    pairs: Sequence[MinimalPair],
    grid: SweepGrid | None = None,
    *,
    batch_size: int = 16,
    n_boot: int = 1000,
    log_path: str | os.PathLike | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """BLiMP accuracy (%) under each perturbation of ``grid`` (default :class:`SweepGrid`),
    per paradigm and pooled.

    Columns: the perturbation, ``paradigm, n, accuracy, ci_low, ci_high`` (bootstrap over
    pairs), ``clean_accuracy``, ``drop`` (clean − perturbed, points), ``delta_over_norm``.
    """
    if not pairs:
        raise InputError("no minimal pairs to score")
    grid = grid or SweepGrid()
    clean, settings = grid.sweep(
        model,
        [p.good for p in pairs] + [p.bad for p in pairs],
        reduce="sum",
        max_tokens=10**6,
        batch_size=batch_size,
        keep_all=True,
    )
    n, names = len(pairs), [p.paradigm for p in pairs]
    base = accuracy_rows(pair_correct(clean.scores[:n], clean.scores[n:]), names, n_boot=n_boot)
    base_acc = dict(zip(base["paradigm"], base["accuracy"]))

    def measure(pert) -> dict:
        scores = perturbed_scores(model, clean, pert)
        return {"rows": accuracy_rows(pair_correct(scores[:n], scores[n:]), names, n_boot=n_boot).to_dict("records")}

    runs = grid.run(
        model,
        clean,
        measure,
        key=KEY,
        settings=settings,
        log_path=log_path,
        progress=progress,
        desc="BLiMP perturbations",
    )
    df = pd.concat(
        [
            pd.DataFrame(r["rows"]).assign(
                **{k: (str(v) if isinstance(v, list) else v) for k, v in r.items() if k in KEY}
            )
            for r in runs
        ],
        ignore_index=True,
    )
    df["clean_accuracy"] = df["paradigm"].map(base_acc)
    df["drop"] = df["clean_accuracy"] - df["accuracy"]
    df["delta_over_norm"] = df["delta"] if grid.relative else df["delta"] / clean.median_norm
    return df
