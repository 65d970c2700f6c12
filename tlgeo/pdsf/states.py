"""Last-token states of a prompt set at every layer, and each prompt's prediction direction.

One forward per batch of right-padded prompts with a ``names_filter`` (the residual
entering block 0 and leaving each block, never a full cache); causal attention makes
each prompt's last real position exact under right padding. ``states[i]`` is the
residual after ``i`` blocks (0: the embeddings; ``n_layers``: before the final norm).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..geometry.subspaces import prediction_directions
from ..hooks.resume import readout, unembedding
from ..models import Model

__all__ = ["PromptStates", "last_token_states", "final_norm_scale", "directions"]


@dataclass
class PromptStates:
    """``states [n_layers + 1, n, d]`` (float32) and ``predicted [n]``: each prompt's final argmax;
    ``lens [n_layers + 1, n]``: the logit-lens argmax of each state (final norm and unembedding)."""

    states: Float[Tensor, "states n d_model"]
    predicted: Int[Tensor, "n"]
    lens: Int[Tensor, "states n"]
    lengths: Int[Tensor, "n"]

    @property
    def n_layers(self) -> int:
        return self.states.shape[0] - 1


def _names(n_layers: int) -> list[str]:
    return ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(n_layers)]


def last_token_states(model: Model, prompts: Sequence[Int[Tensor, "pos"]], *, batch_size: int = 16) -> PromptStates:
    """:class:`PromptStates` of token-id prompts (:func:`tlgeo.pdsf.prompts.encode_prompts`)."""
    if not prompts:
        raise ValueError("an empty prompt set")
    longest = max(len(p) for p in prompts)
    if longest > model.cfg.n_ctx and getattr(model.cfg, "positional_embedding_type", "") == "standard":
        raise ValueError(f"a prompt of {longest} tokens is longer than the model's {model.cfg.n_ctx} learned "
                         f"positions")
    names = _names(model.cfg.n_layers)
    pad = model.tokenizer.pad_token_id if getattr(model.tokenizer, "pad_token_id", None) is not None else 0
    device = next(model.parameters()).device
    states, predicted, lens, lengths = [], [], [], []
    for s in range(0, len(prompts), batch_size):
        chunk = prompts[s : s + batch_size]
        n = torch.tensor([len(p) for p in chunk])
        toks = torch.full((len(chunk), int(n.max())), pad, dtype=torch.long)
        for j, p in enumerate(chunk):
            toks[j, : len(p)] = p
        rows, last = torch.arange(len(chunk)), n - 1
        with torch.inference_mode():
            logits, cache = model.run_with_cache(toks.to(device), names_filter=lambda x: x in names)
            h = torch.stack([cache[name][rows, last] for name in names]).float()  # [L + 1, b, d]
            lens.append(readout(model, h.to(logits.dtype)).argmax(-1).cpu())
        states.append(h.cpu())
        predicted.append(logits[rows, last].argmax(-1).cpu())
        lengths.append(n)
        del cache
    return PromptStates(torch.cat(states, 1), torch.cat(predicted), torch.cat(lens, 1), torch.cat(lengths))


def final_norm_scale(model: Model) -> Float[Tensor, "d_model"]:
    """The final norm's per-coordinate scale as it acts (float32 ``[d]``): for RMSNorm, ``ln_final``
    of a vector of RMS 1 (so Gemma's ``1 + w`` convention is covered); for LayerNorm, its weight."""
    d = model.cfg.d_model
    if getattr(model, "ln_final", None) is None:  # post-LN OPT: no final norm
        return torch.ones(d)
    if str(getattr(model.cfg, "normalization_type", "")).upper().startswith("RMS"):
        param = next(model.ln_final.parameters())
        with torch.inference_mode():
            return model.ln_final(torch.ones(1, 1, d, dtype=param.dtype, device=param.device))[0, 0].float().cpu()
    w = next((p for n, p in model.ln_final.named_parameters() if n.endswith("weight")), None)
    return torch.ones(d) if w is None else w.detach().float().cpu()


def directions(model: Model, tokens: Int[Tensor, "n"], *, fold_norm: bool = False) -> Float[Tensor, "n d_model"]:
    """Unit prediction directions of ``tokens`` (``[n, d]`` float32): the raw unembedding columns
    (the authors'), or with the final norm's scale folded in (``fold_norm``)."""
    w_u = unembedding(model)
    return prediction_directions(w_u, tokens, final_norm_scale(model) if fold_norm else None)
