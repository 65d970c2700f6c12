"""Pure statistics (numpy only): bootstrap CIs, sign-flip tests, Benjamini–Hochberg.

* :mod:`.resampling`: paired differences per text, token-weighted.
"""

from .resampling import PairedTest, benjamini_hochberg, bootstrap_ci, paired_test, sign_flip_pvalue, weighted_mean

__all__ = ["weighted_mean", "bootstrap_ci", "sign_flip_pvalue", "benjamini_hochberg", "paired_test", "PairedTest"]
