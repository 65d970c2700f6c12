"""Syntax under L2-matched perturbations: BLiMP subject–verb agreement accuracy per ``delta``.

Both sentences of every pair are scored whole (total NLL) clean once and then
under each perturbation from the cached prefix (:mod:`.engine`); a pair is
right when the good sentence is more probable. One row per (kind, delta, seed,
paradigm) plus the pooled row, with the clean accuracy beside it. The paper:
Pythia-410M, 200 items, clean 89.5 %; at delta = 5 magnitude 69.1 % vs angle
87.9 %, at 10 56.0 vs 77.1, at 15 53.5 vs 67.4.
"""

from __future__ import annotations

import hashlib
import os
import time
from typing import Iterable, Sequence

import pandas as pd

from ..evals.blimp import AGREEMENT, MinimalPair, accuracy_rows, load_blimp, pair_correct
from ..hooks.perturb import KINDS, Perturbation
from ..results import ResultLog
from .damage import check_grid, delta_grid
from .engine import clean_pass, perturbed_scores

__all__ = ["PAPER_BLIMP", "agreement_pairs", "blimp_damage"]

PAPER_BLIMP = {0.0: (89.5, 89.5), 5.0: (69.1, 87.9), 10.0: (56.0, 77.1), 15.0: (53.5, 67.4)}  # (magnitude, angle)
KEY = ("kind", "delta", "relative", "seed", "mode", "flip", "layers", "n_pairs", "pairs_sha1")


def agreement_pairs(limit: int | None = None, paradigms: Iterable[str] = AGREEMENT) -> list[MinimalPair]:
    """The first ``limit`` pairs of each agreement paradigm."""
    return [p for name in paradigms for p in load_blimp(name, limit)]


def blimp_damage(
    model,
    pairs: Sequence[MinimalPair],
    *,
    deltas: Iterable[float] | None = None,
    kinds: Iterable[str] = KINDS,
    seeds: int = 5,
    layers: int | Iterable[int] | None = None,
    mode: str = "exact",
    relative: bool = False,
    flip: str = "allow",
    batch_size: int = 16,
    n_boot: int = 1000,
    log_path: str | os.PathLike | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """BLiMP accuracy (%) under each perturbation (kind x delta x seed ``42 + i``), per paradigm and pooled.

    ``deltas=None``: as :func:`~tlgeo.dirmag.damage.lm_damage` (the paper's grid and 0.25, 0.5,
    1 x the median state norm; relative: 0.05 .. 1).

    Columns: the perturbation, ``paradigm, n, accuracy, ci_low, ci_high`` (bootstrap over
    pairs), ``clean_accuracy``, ``drop`` (clean − perturbed, points), ``delta_over_norm``.
    """
    if not pairs:
        raise ValueError("no minimal pairs to score")
    kinds, chosen, deltas = check_grid(model, kinds, seeds, layers, mode, flip, deltas)
    sentences = [p.good for p in pairs] + [p.bad for p in pairs]
    clean = clean_pass(model, sentences, chosen, reduce="sum", max_tokens=10**6, keep_all=True,
                       batch_size=1 if mode == "faithful" else batch_size)
    if deltas is None:
        deltas = list((0.05, 0.1, 0.25, 0.5, 1.0) if relative else delta_grid(clean.median_norm))
    n = len(pairs)
    names = [p.paradigm for p in pairs]
    base = accuracy_rows(pair_correct(clean.scores[:n], clean.scores[n:]), names, n_boot=n_boot)
    base_acc = dict(zip(base["paradigm"], base["accuracy"]))
    settings = {"mode": mode, "flip": flip, "layers": chosen, "n_pairs": n, "relative": relative,
                "pairs_sha1": hashlib.sha1("\n".join(sentences).encode("utf-8")).hexdigest()[:16]}
    log = ResultLog(log_path, KEY) if log_path is not None else None
    grid = [(k, d, s) for d in deltas for k in kinds for s in range(seeds)]
    if progress:
        from tqdm.auto import tqdm

        grid = tqdm(grid, desc="BLiMP perturbations", unit="run")
    frames = []
    for kind, delta, i in grid:
        key = {"kind": kind, "delta": delta, "seed": 42 + i, **settings}
        stored = log.get(**key) if log is not None else None
        if stored is None:
            t0 = time.perf_counter()
            pert = Perturbation(kind, delta, seed=42 + i, layers=tuple(chosen), mode=mode, relative=relative, flip=flip)
            s = perturbed_scores(model, clean, pert)
            acc = accuracy_rows(pair_correct(s[:n], s[n:]), names, n_boot=n_boot)
            stored = {**key, "rows": acc.to_dict(orient="records"), "wall_s": time.perf_counter() - t0}
            if log is not None:
                log.add(stored)
        acc = pd.DataFrame(stored["rows"])
        frames.append(acc.assign(**{k: (v if not isinstance(v, list) else str(v)) for k, v in key.items()},
                                 clean_accuracy=acc["paradigm"].map(base_acc),
                                 delta_over_norm=delta if relative else delta / clean.median_norm))
    df = pd.concat(frames, ignore_index=True)
    df["drop"] = df["clean_accuracy"] - df["accuracy"]
    return df
