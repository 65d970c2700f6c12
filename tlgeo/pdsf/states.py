"""Last-token states of a prompt set at every layer, and each prompt's prediction direction.

One forward per batch of right-padded prompts, whose hooks keep only each prompt's last real
position of the residual entering block 0 and leaving each block (never a cache); causal
attention makes that position exact under right padding. ``states[i]`` is the
residual after ``i`` blocks (0: the embeddings; ``n_layers``: before the final norm).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..geometry.subspaces import prediction_directions
from ..hooks.resume import last_block_output, readout, readout_ok, unembedding
from ..models import Model

__all__ = ["PromptStates", "last_token_states", "logit_lens", "final_norm_scale", "directions"]


@dataclass
class PromptStates:
    """``states [n_layers + 1, n, d]`` (float32) and ``predicted [n]``: each prompt's final argmax;
    ``lens [n_layers + 1, n]``: the logit-lens argmax of each state (final norm and unembedding), None
    where it was not asked for."""

    states: Float[Tensor, "states n d_model"]
    predicted: Int[Tensor, "n"]
    lens: Int[Tensor, "states n"] | None
    lengths: Int[Tensor, "n"]

    @property
    def n_layers(self) -> int:
        return self.states.shape[0] - 1

    def select(self, index: Sequence[int]) -> "PromptStates":
        """The states of the prompts at ``index``, in that order."""
        i = torch.as_tensor(list(index), dtype=torch.long)
        return PromptStates(
            self.states[:, i], self.predicted[i], None if self.lens is None else self.lens[:, i], self.lengths[i]
        )


def _names(n_layers: int) -> list[str]:
    return ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(n_layers)]


def last_token_states(
    model: Model, prompts: Sequence[Int[Tensor, "pos"]], *, batch_size: int = 16, lens: bool = True
) -> PromptStates:
    """:class:`PromptStates` of token-id prompts (:func:`tlgeo.pdsf.prompts.encode_prompts`); with
    ``lens=False`` no logit lens (``lens`` is None; :func:`logit_lens` computes it later).

    Batches are of prompts of similar length (less padding); each forward stops at the last block
    and only the last real position goes through the final norm and the unembedding, where
    :func:`~tlgeo.hooks.resume.readout_ok` holds (otherwise a full forward)."""
    if not prompts:
        raise InputError("an empty prompt set")
    longest = max(len(p) for p in prompts)
    if longest > model.cfg.n_ctx and getattr(model.cfg, "positional_embedding_type", "") == "standard":
        raise InputError(f"a prompt of {longest} tokens is longer than the model's {model.cfg.n_ctx} learned positions")
    names = _names(model.cfg.n_layers)
    pad = model.tokenizer.pad_token_id if getattr(model.tokenizer, "pad_token_id", None) is not None else 0
    device = next(model.parameters()).device
    lengths = torch.tensor([len(p) for p in prompts])
    order = torch.argsort(lengths, stable=True)  # similar lengths together: less padding
    states, predicted = [], []
    for s in range(0, len(prompts), batch_size):
        chunk = [prompts[int(i)] for i in order[s : s + batch_size]]
        n = lengths[order[s : s + batch_size]]
        toks = torch.full((len(chunk), int(n.max())), pad, dtype=torch.long)
        for j, p in enumerate(chunk):
            toks[j, : len(p)] = p
        rows, last = torch.arange(len(chunk)), n - 1
        h, top = _batch_states(model, toks.to(device), names, rows, last)
        states.append(h.cpu())
        predicted.append(top.cpu())
    back = torch.argsort(order)  # the prompts' own order
    h = torch.cat(states, 1)[:, back]
    return PromptStates(h, torch.cat(predicted)[back], logit_lens(model, h) if lens else None, lengths)


def _batch_states(model: Model, toks: Tensor, names: list[str], rows: Tensor, last: Tensor) -> tuple[Tensor, Tensor]:
    """The states ``[L + 1, b, d]`` (float32, on the host) at each row's last real position, and the argmax there."""
    with torch.inference_mode():
        if readout_ok(model, toks):
            got: list[Tensor | None] = [None] * (len(names) - 1)

            def keep(i: int):
                def hook_fn(x: Tensor, hook) -> None:  # keyed by position: a bridge may name an alias otherwise
                    got[i] = x[rows, last].float().cpu()  # the host pool (blocks may be on several devices)

                return hook_fn

            final = last_block_output(model, toks, [(name, keep(i)) for i, name in enumerate(names[:-1])])
            h = torch.stack([*got, final[rows, last].float().cpu()])
            return h, readout(model, final[rows, last]).argmax(-1)
        logits, cache = model.run_with_cache(toks, names_filter=lambda x: x in names)
        return torch.stack([cache[name][rows, last].float().cpu() for name in names]), logits[rows, last].argmax(-1)


def logit_lens(model: Model, states: Float[Tensor, "states n d_model"], *, chunk: int = 256) -> Int[Tensor, "states n"]:
    """The logit-lens argmax of each state (the final norm and the unembedding), ``chunk`` states
    of a layer at a time."""
    param = next(model.parameters())
    out = []
    with torch.inference_mode():
        for h in states:
            out.append(
                torch.cat(
                    [
                        readout(model, h[s : s + chunk].to(param.device, param.dtype)).argmax(-1).cpu()
                        for s in range(0, h.shape[0], chunk)
                    ]
                )
            )
    return torch.stack(out)


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
