"""Linear probes on the direction vs the magnitude of states (scikit-learn; no models).

:func:`probe_features` splits states ``h`` into the features a probe sees:
``direction`` (``h / ||h||``, the norm removed), ``magnitude`` (``||h||`` alone)
or ``both`` (the direction and the norm). :func:`fit_probe` trains a standardised
multinomial logistic regression (``task="classify"``) or ridge regression
(``"regress"``) on one split, scores it on another against the majority class /
the training mean, and gives a percentile bootstrap CI that resamples *groups*
(sentences) of the held-out split, since the words of one sentence are not
independent.
"""

from __future__ import annotations

from ..errors import InputError
from dataclasses import asdict, dataclass

import numpy as np

from .resampling import group_resamples

__all__ = ["FEATURES", "TASKS", "ProbeScore", "probe_features", "fit_probe"]

FEATURES = ("direction", "magnitude", "both")
TASKS = ("classify", "regress")


@dataclass(frozen=True)
class ProbeScore:
    """Held-out accuracy (classify, 0..1) or R² (regress) of a probe and of its baseline."""

    score: float
    ci_low: float
    ci_high: float
    baseline: float
    n_train: int
    n_test: int

    def to_dict(self) -> dict:
        return asdict(self)


def probe_features(h: np.ndarray, kind: str) -> np.ndarray:
    """Features ``[n, d]`` (direction), ``[n, 1]`` (magnitude) or ``[n, d + 1]`` (both) of states
    ``h [n, d]``, float64. A zero state has direction 0 (no NaN)."""
    if kind not in FEATURES:
        raise InputError(f"unknown probe features {kind!r}; choose from {FEATURES}")
    h = np.asarray(h, dtype=np.float64)
    if h.ndim != 2:
        raise InputError(f"states must be [n, d], got shape {h.shape}")
    norm = np.linalg.norm(h, axis=1, keepdims=True)
    if kind == "magnitude":
        return norm
    direction = np.divide(h, norm, out=np.zeros_like(h), where=norm > 0)
    return direction if kind == "direction" else np.hstack([direction, norm])


def _estimator(task: str, seed: int, max_iter: int):
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if task == "classify":
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=max_iter, random_state=seed))
    return make_pipeline(StandardScaler(), Ridge(alpha=1.0))


def _score(task: str, y: np.ndarray, pred: np.ndarray) -> float:
    """Accuracy, or R² = 1 - SS_res / SS_tot (sklearn's ``r2_score`` for a non-constant ``y``, without its
    input checks: it is called once per bootstrap resample, where they took ~0.5 ms each)."""
    if task == "classify":
        return float(np.mean(y == pred))
    y, pred = np.asarray(y, dtype=np.float64), np.asarray(pred, dtype=np.float64)
    total = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum((y - pred) ** 2)) / total if total > 0 else float("nan")


def fit_probe(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    task: str = "classify",
    groups: np.ndarray | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    max_iter: int = 500,
) -> ProbeScore:
    """Train on ``(x_train, y_train)``, score on ``(x_test, y_test)``.

    ``groups [n_test]``: the bootstrap resamples these units (default: each test item)."""
    if task not in TASKS:
        raise InputError(f"unknown probe task {task!r}; choose from {TASKS}")
    x_train, x_test = np.asarray(x_train, dtype=np.float64), np.asarray(x_test, dtype=np.float64)
    y_train, y_test = np.asarray(y_train), np.asarray(y_test)
    if len(x_train) < 2 or len(x_test) < 1:
        raise InputError(f"a probe needs >= 2 training and >= 1 test items, got {len(x_train)} and {len(x_test)}")
    if len(x_train) != len(y_train) or len(x_test) != len(y_test):
        raise InputError("features and labels differ in length")
    if task == "classify" and len(np.unique(y_train)) < 2:
        raise InputError("the training labels have a single class: nothing to classify")
    est = _estimator(task, seed, max_iter)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs convergence at max_iter: the score says how good it is
        est.fit(x_train, y_train)
    pred = est.predict(x_test)
    if task == "classify":
        values, counts = np.unique(y_train, return_counts=True)
        base_pred = np.full(len(y_test), values[np.argmax(counts)])
    else:
        base_pred = np.full(len(y_test), float(np.mean(y_train)))
    groups = np.arange(len(y_test)) if groups is None else np.asarray(groups)
    if len(groups) != len(y_test):
        raise InputError(f"groups has {len(groups)} entries for {len(y_test)} test items")
    boots = []
    for idx in group_resamples(groups, n_boot, seed):
        if task == "regress" and np.ptp(y_test[idx]) == 0:
            continue  # R² is undefined on a constant resample
        boots.append(_score(task, y_test[idx], pred[idx]))
    lo, hi = np.percentile(boots, [2.5, 97.5]) if boots else (np.nan, np.nan)
    return ProbeScore(
        score=_score(task, y_test, pred),
        ci_low=float(lo),
        ci_high=float(hi),
        baseline=_score(task, y_test, base_pred),
        n_train=len(y_train),
        n_test=len(y_test),
    )
