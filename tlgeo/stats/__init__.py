"""Pure statistics (numpy, scipy, scikit-learn; no models): bootstrap CIs, sign-flip tests,
Benjamini–Hochberg, linear probes.

* :mod:`.resampling`: paired differences per text, token-weighted.
* :mod:`.probes`: probes on the direction vs the magnitude of states.
* :mod:`.correlation`: Spearman's rho with a (group) bootstrap CI; two dependent correlations compared
  (Steiger's Z, paired bootstrap).
* :mod:`.discrimination`: silhouette, cosine gap against label shuffles, principal angles.
"""

from .correlation import Correlation, CorrelationDifference, compare_correlations, spearman_ci, steiger_z
from .discrimination import GapTest, cosine_gap, cosine_gap_test, group_angles, silhouette
from .probes import FEATURES, ProbeScore, fit_probe, probe_features
from .resampling import (
    PairedTest,
    benjamini_hochberg,
    bootstrap_ci,
    paired_test,
    ratio_ci,
    sign_flip_pvalue,
    weighted_mean,
)

__all__ = [
    "weighted_mean",
    "bootstrap_ci",
    "ratio_ci",
    "sign_flip_pvalue",
    "benjamini_hochberg",
    "paired_test",
    "PairedTest",
    "FEATURES",
    "ProbeScore",
    "fit_probe",
    "probe_features",
    "Correlation",
    "spearman_ci",
    "CorrelationDifference",
    "compare_correlations",
    "steiger_z",
    "GapTest",
    "cosine_gap",
    "cosine_gap_test",
    "group_angles",
    "silhouette",
]
