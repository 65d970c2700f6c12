"""Score sentences clean once, then under many perturbations from the cached prefix.

:func:`clean_pass` tokenises and right-pads the sentences
(:func:`tlgeo.evals.sentences.sentence_batches`), runs them once, keeps the residual entering
the first perturbed block, each sentence's clean negative log-likelihood and
the median norm of the states at the perturbed layers. :func:`perturbed_scores`
resumes from that residual (:func:`tlgeo.hooks.resume.resume_forward`) under a
:class:`~tlgeo.hooks.perturb.Perturbation`, so a perturbed pass costs only the
blocks from the first perturbed one on.

``reduce``: see :func:`tlgeo.evals.sentences.sentence_nll`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from jaxtyping import Float
from torch import Tensor

from ..evals.sentences import REDUCTIONS, Batch, sentence_batches, sentence_nll
from ..hooks.perturb import Perturbation
from ..hooks.resume import resume_forward

__all__ = ["CleanPass", "clean_pass", "perturbed_scores", "sentence_batches", "sentence_nll"]


@dataclass
class CleanPass:
    """The clean run of a sentence set, kept for resumed perturbed runs."""

    batches: list[Batch]
    resid: list[Tensor]  # blocks.{first}.hook_resid_pre per batch
    scores: Float[Tensor, "n"]  # clean NLL per sentence (``reduce``)
    median_norm: float  # median ||h|| of the real tokens at the perturbed layers
    first: int
    layers: list[int]
    reduce: str

    @property
    def n_tokens(self) -> int:
        return int(sum(int(l.sum()) for _, l in self.batches))


def clean_pass(model, sentences: Sequence[str], layers: list[int], *, reduce: str = "mean", max_tokens: int = 64,
               batch_size: int = 16, keep_all: bool = False) -> CleanPass:
    """Run ``sentences`` once; keep what the perturbed runs at ``layers`` need."""
    if reduce not in REDUCTIONS:
        raise ValueError(f"unknown reduce {reduce!r}; choose from {REDUCTIONS}")
    batches = sentence_batches(model, sentences, max_tokens=max_tokens, batch_size=batch_size, keep_all=keep_all)
    first = min(layers)
    names = [f"blocks.{first}.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in layers]
    resid, scores, norms = [], [], []
    with torch.inference_mode():
        for toks, lengths in batches:
            logits, cache = model.run_with_cache(toks, names_filter=names)
            scores.append(sentence_nll(logits, toks, lengths, reduce))
            real = torch.arange(toks.shape[1])[None, :] < lengths[:, None]
            for l in layers:
                norms.append(cache[f"blocks.{l}.hook_resid_post"].float().norm(dim=-1).cpu()[real])
            resid.append(cache[names[0]].clone())
            del logits, cache
    return CleanPass(batches, resid, torch.cat(scores), float(torch.cat(norms).median()), first, list(layers), reduce)


def perturbed_scores(model, clean: CleanPass, pert: Perturbation, stats: list[dict] | None = None) -> Float[Tensor, "n"]:
    """Each sentence's NLL (``clean.reduce``) under ``pert``, resumed from the clean prefix.

    The hooks are made once for all batches (faithful mode: one noise direction per
    tensor shape for the whole sentence set, as the notebook within a seed)."""
    if min(pert.chosen_layers(model.cfg)) < clean.first:
        raise ValueError(f"the perturbation starts before block {clean.first}, where the clean pass was cut")
    hooks = pert.hooks(model, stats=stats)
    with torch.inference_mode():
        return torch.cat([sentence_nll(resume_forward(model, resid, clean.first, hooks), toks, lengths, clean.reduce)
                          for resid, (toks, lengths) in zip(clean.resid, clean.batches)])
