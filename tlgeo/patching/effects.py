"""Patch effects: the share of the clean-minus-corrupted metric gap that a patch moves.

With per-prompt metrics ``clean``, ``corrupted`` and ``patched`` (the patched run's)::

    denoise (clean -> corrupted run):  (mean patched - mean corrupted) / (mean clean - mean corrupted)
    noise   (corrupted -> clean run):  (mean clean - mean patched)     / (mean clean - mean corrupted)

so both are 0 for a patch that changes nothing and 1 for one that carries the whole
behaviour (denoising restores it, noising destroys it). The interval varies over prompts: Fieller's for a
ratio of means, which agrees with the t-test of the numerators (:func:`effect_test`).

Multiple comparisons: every effect also gets a two-sided p-value of ``effect != 0``
(:func:`effect_test`) and a Benjamini–Hochberg q-value over its family (:func:`add_qvalues`): the rows that
share a model identity and :data:`TEST_FAMILY`, i.e. every component, layer and head of one (model, task,
prompts, seed, method, direction, positions, frame) setting, so that a "top head" can be read with a false
discovery rate. The family is the table's rows of that setting, so a q depends on which components and layers
the run patched (a path's q on which receivers and senders were swept): each row's ``family_size`` says how
many tests its q was adjusted over.
"""

from __future__ import annotations

from ..errors import InputError
import numpy as np
import pandas as pd
from scipy import stats

from ..runner.results import IDENTITY, row_ids
from ..stats.multiple import bh_qvalues
from ..stats.ratio import fieller_interval, ratio_test

__all__ = [
    "effect",
    "effect_ci",
    "effect_test",
    "add_qvalues",
    "TEST_FAMILY",
    "ALPHA",
    "CALIBRATED_PROMPTS",
    "agreement",
    "interactions",
    "SPLITS",
]

TEST_FAMILY = ("task", "prompts", "seed", "method", "direction", "positions", "frame")  # with the identity columns
ALPHA = 0.05  # the false discovery rate of ``significant``
# per method, the smallest prompt count from which scripts/bench_calibration.py measured a 95 % interval's coverage
# >= 0.93 on every zoo case (cells whose per-prompt numerators have |skewness| <= 3; results/calibration/
# calibration.csv, docs/statistics.md; tests/patching/test_calibration.py derives these from the table)
CALIBRATED_PROMPTS = {"exact": 16, "paths": 32, "attribution": 64}


def _num(patched, clean, corrupted, direction: str) -> np.ndarray:
    p, c, k = (np.asarray(x, dtype=np.float64) for x in (patched, clean, corrupted))
    if not p.shape == c.shape == k.shape:
        raise InputError(f"patched {p.shape}, clean {c.shape} and corrupted {k.shape} metrics must match")
    if direction == "denoise":
        return p - k
    if direction == "noise":
        return c - p
    raise InputError(f"unknown direction {direction!r}; choose from ('denoise', 'noise')")


def _gap(clean, corrupted) -> np.ndarray:
    return np.asarray(clean, dtype=np.float64) - np.asarray(corrupted, dtype=np.float64)


def effect(patched, clean, corrupted, direction: str) -> float:
    """The normalised effect of a patch (see the module docstring); NaN for a zero gap."""
    num = _num(patched, clean, corrupted, direction)
    gap = float(np.mean(np.asarray(clean, dtype=np.float64) - np.asarray(corrupted, dtype=np.float64)))
    return float(num.mean() / gap) if gap != 0 else float("nan")


def effect_ci(patched, clean, corrupted, direction: str, *, level: float = 0.95) -> tuple[float, float]:
    """Fieller's ``level`` interval of :func:`effect` over prompts (:func:`tlgeo.stats.ratio.fieller_interval`):
    the effects that the t-test of ``num - effect * gap`` does not reject; ``(-inf, inf)`` when the gap is not
    distinguishable from 0 at this many prompts."""
    num, den = _num(patched, clean, corrupted, direction), _gap(clean, corrupted)
    low, high, _ = fieller_interval(num, den, level)
    return low, high


def effect_test(patched, clean, corrupted, direction: str, *, level: float = 0.95) -> dict[str, float]:
    """:func:`effect`, its interval over prompts (the very bounds of :func:`effect_ci`), the delta-method
    standard error ``se`` and the two-sided p-value ``p`` of ``effect != 0``.

    The effect is 0 exactly when the mean of the per-prompt numerators (``patched - corrupted``, or
    ``clean - patched`` for noising) is, so ``p`` is the one-sample t-test of those numerators
    (:func:`tlgeo.stats.multiple.mean_test_pvalue`, ``n - 1`` degrees of freedom), and the interval is
    Fieller's for the ratio of means (:func:`tlgeo.stats.ratio.ratio_test`), which inverts the same t-test:
    **the interval excludes 0 exactly when p < 1 - level**. Its coverage and the test's false-positive rate
    are measured by ``scripts/bench_calibration.py`` (``docs/statistics.md``). Never NaN: an undefined test
    (a single prompt) has ``p = 1`` and the bounds ``-inf, inf``."""
    num, den = _num(patched, clean, corrupted, direction), _gap(clean, corrupted)
    e = effect(patched, clean, corrupted, direction)
    r = ratio_test(num, den, level)
    return {"effect": e, "ci_low": r.low, "ci_high": r.high, "se": r.se, "p": r.p}


def add_qvalues(effects: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """``effects`` with ``q`` (Benjamini–Hochberg over the ``p`` of each family: the rows that share the
    identity and :data:`TEST_FAMILY` columns, i.e. every component, layer and head of one task, method and
    direction, :func:`tlgeo.stats.multiple.bh_qvalues`), ``family_size`` (the tests in the row's family) and
    ``significant`` (``q < alpha``) set afresh, so they must be computed on the complete table. A table without
    ``p`` is returned as it is."""
    if "p" not in effects.columns:
        return effects
    df = effects.copy()
    q = np.full(len(df), np.nan)
    size = np.zeros(len(df), dtype=np.int64)
    if len(df):
        fam = [c for c in (*IDENTITY, *TEST_FAMILY) if c in df.columns]
        keys = row_ids(df, fam) if fam else pd.Series("", index=df.index)
        p = pd.to_numeric(df["p"], errors="coerce").to_numpy(dtype=np.float64)
        for idx in keys.groupby(keys, sort=False).indices.values():
            q[idx] = bh_qvalues(p[idx])
            size[idx] = int(np.isfinite(p[idx]).sum())
    df["q"] = q
    df["family_size"] = size
    df["significant"] = q < alpha  # NaN (a row without p) is not significant
    return df


def _identified(effects: pd.DataFrame, key: list[str]) -> list[str]:
    """``key`` after the identity columns ``effects`` has (``model`` at least): a summary keeps them."""
    return [*dict.fromkeys(["model", *(c for c in IDENTITY if c in effects.columns)]), *key]


def agreement(effects: pd.DataFrame) -> pd.DataFrame:
    """Attribution against exact patching: per (model, task, direction, positions, frame, component),
    Pearson and Spearman correlation of the two methods' effects over (layer, head), the number of
    pairs, the largest absolute difference and the block where it is."""
    key = _identified(effects, ["task", "prompts", "seed", "direction", "positions", "frame", "component"])
    cell = ["layer", "head"]
    ex = effects[effects["method"] == "exact"].set_index([*key, *cell])["effect"]
    at = effects[effects["method"] == "attribution"].set_index([*key, *cell])["effect"]
    both = pd.concat({"exact": ex, "attribution": at}, axis=1, join="inner").dropna().reset_index()
    rows = []
    for k, g in both.groupby(key, sort=False):
        diff = (g["attribution"] - g["exact"]).abs()
        worst = g.loc[diff.idxmax()]
        pearson = spearman = float("nan")
        if len(g) > 2 and g["exact"].std() > 0 and g["attribution"].std() > 0:
            pearson = float(stats.pearsonr(g["exact"], g["attribution"])[0])
            spearman = float(stats.spearmanr(g["exact"], g["attribution"])[0])
        rows.append(
            {
                **dict(zip(key, k)),
                "pairs": len(g),
                "pearson": pearson,
                "spearman": spearman,
                "max_abs_diff": float(diff.max()),
                "worst_layer": int(worst["layer"]),
                "worst_head": int(worst["head"]),
            }
        )
    return pd.DataFrame(
        rows, columns=[*key, "pairs", "pearson", "spearman", "max_abs_diff", "worst_layer", "worst_head"]
    )


SPLITS = (
    ("head", ("head_par", "head_perp")),
    ("head", ("self", "nonself")),
    ("nonself", ("nonself_par", "nonself_perp")),
    ("mlp", ("mlp_par", "mlp_perp")),
)


def interactions(effects: pd.DataFrame, method: str = "exact") -> pd.DataFrame:
    """How far the effects of a split's parts fall short of the whole's: per split (``head`` into
    ``head_par`` + ``head_perp``, ``head`` into ``self`` + ``nonself``, ``nonself`` into its parts,
    ``mlp`` into its parts), layer and head, ``whole``, ``parts_sum`` and ``interaction = whole -
    parts_sum``. The changes add up exactly; their effects only to first order (0 for attribution)."""
    key = _identified(effects, ["task", "prompts", "seed", "direction", "positions", "frame", "layer", "head"])
    df = effects[effects["method"] == method]
    by = df.set_index([*key, "component"])["effect"].unstack("component")
    rows = []
    for whole, parts in SPLITS:
        if not {whole, *parts} <= set(by.columns):
            continue
        d = by[[whole, *parts]].dropna()
        if d.empty:
            continue
        part = d[list(parts)].sum(1)
        rows.append(
            pd.DataFrame(
                {
                    "split": f"{whole} = {' + '.join(parts)}",
                    "whole": d[whole],
                    "parts_sum": part,
                    "interaction": d[whole] - part,
                }
            ).reset_index()
        )
    cols = [*key, "split", "whole", "parts_sum", "interaction"]
    return pd.concat(rows, ignore_index=True)[cols] if rows else pd.DataFrame(columns=cols)
