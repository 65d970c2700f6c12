"""Direction vs magnitude (seed paper 003): L2-matched perturbations of the residual stream.

* :mod:`.engine`: sentences scored clean once, then under each perturbation
  from the cached prefix below the first perturbed block.
* :mod:`.damage`: LM damage of magnitude vs angle perturbations per ``delta``
  and seed on the notebook's WikiText sentences.
* :mod:`.syntax`: BLiMP subject–verb agreement accuracy under the same perturbations.
* :mod:`.repair`: causal repair: attention or norm outputs made clean again in perturbed runs.
* :mod:`.entropy`: attention entropy, clean vs perturbed.
* :mod:`.probes`: part-of-speech and depth probes on the direction vs the magnitude.
* :mod:`.plots`: the figures (damage, BLiMP, repair, probes) and the per-token circuitsvis view.
* :mod:`.atlas`: the ``dirmag`` step of ``tlgeo atlas`` (this analysis's run at the atlas budgets, three sections).

The perturbations are :class:`tlgeo.hooks.perturbation.Perturbation` (hooks) over
:mod:`tlgeo.geometry.perturb` (the math). The matched LayerNorm / RMSNorm pair
is two ``tlgeo train`` runs (``--arch gpt`` and ``--arch llama``: RESULTS.md section 2);
``notebooks/06_direction_magnitude.ipynb`` walks through every measurement.
"""

from .damage import damage_table, lm_damage, wikitext_sentences
from .engine import PAPER_DELTAS, SweepGrid, clean_pass, delta_grid, perturbed_scores, sentence_batches, sentence_nll
from .entropy import attention_entropy
from .probes import direction_magnitude_probes
from .repair import causal_repair
from .syntax import agreement_pairs, blimp_damage

__all__ = [
    "PAPER_DELTAS",
    "SweepGrid",
    "wikitext_sentences",
    "delta_grid",
    "lm_damage",
    "damage_table",
    "clean_pass",
    "perturbed_scores",
    "sentence_batches",
    "sentence_nll",
    "agreement_pairs",
    "blimp_damage",
    "causal_repair",
    "attention_entropy",
    "direction_magnitude_probes",
]
