"""The perturbed-scoring engine: the clean prefix kept, perturbations resumed from it."""

import pytest

from tlgeo.dirmag.engine import clean_pass, perturbed_scores
from tlgeo.hooks.perturbation import Perturbation


def test_clean_pass_and_a_perturbation_that_starts_too_early(llama, sentences):
    clean = clean_pass(llama, sentences, [2], batch_size=4)
    assert clean.first == 2 and clean.scores.shape == (6,) and clean.median_norm > 0
    with pytest.raises(ValueError, match="starts before block 2"):
        perturbed_scores(llama, clean, Perturbation("angle", 0.1, layers=(1, 2)))
