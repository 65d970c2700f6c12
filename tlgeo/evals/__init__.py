"""Evaluations of a model, edited or not: each takes ``fwd_hooks`` (or runs inside
:func:`tlgeo.hooks.edits.edit`) and knows nothing of the analyses.

* :mod:`.perplexity`: perplexity over disjoint windows of a text (and the token
  windows themselves).
* :mod:`.zeroshot`: offline multiple-choice tasks (PIQA, ARC, WinoGrande, ...),
  scored as lm-evaluation-harness does; paired accuracy changes.
* :mod:`.ruler`: RULER-style long-context tasks: generation, prompts, scoring.
* :mod:`.sentences`: sentences as padded batches and their NLL (mean or total).
* :mod:`.blimp`: BLiMP minimal pairs (subject–verb agreement), accuracy with CIs.
* :mod:`.lm_eval_model`: tlgeo as an lm-evaluation-harness model (``tlgeo``),
  imported on its own (it needs the ``eval`` extra).
"""

from .perplexity import PerplexityResult, perplexity, token_windows, tokenize_text
from .zeroshot import evaluate_zeroshot, paired_accuracy_change

__all__ = [
    "PerplexityResult",
    "perplexity",
    "token_windows",
    "tokenize_text",
    "evaluate_zeroshot",
    "paired_accuracy_change",
]
