"""The PDSF analysis of one model: the geometry of a prompt set at every layer, and persistent
rotations during generation; each records how the prompts were encoded.

* :func:`pdsf_states`: encode a prompt set, collect its last-token states and prediction
  directions (one forward per batch);
* :func:`run_geometry`: :func:`tlgeo.pdsf.geometry.pdsf_geometry` on them;
* :func:`run_generation`: :func:`tlgeo.pdsf.interventions.persistent_rotations`, one condition
  at a time, each finished condition (and the unedited continuations) a line of the resume log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import pandas as pd
import torch

from ..results import ResultLog
from .geometry import PDSFGeometry, pdsf_geometry
from .interventions import CONDITIONS, default_layer, divergence_summary, persistent_rotations
from .prompts import Encoding, PromptSet, encode_prompts
from .states import PromptStates, directions, final_norm_scale, last_token_states

__all__ = ["PDSFStates", "pdsf_states", "run_geometry", "run_generation"]


@dataclass
class PDSFStates:
    prompts: PromptSet
    tokens: list[torch.Tensor]
    encoding: Encoding
    states: PromptStates
    u: torch.Tensor
    fold_norm: bool

    def settings(self) -> dict:
        return {"prompt_set": self.prompts.name, "n_prompts": len(self.prompts), **self.encoding.as_dict(),
                "fold_norm": self.fold_norm}


def pdsf_states(model, prompts: PromptSet, *, template: str = "raw", bos: bool | None = None,
                fold_norm: bool = False, batch_size: int = 16) -> PDSFStates:
    """Encode ``prompts``, collect their last-token states, and the prediction direction of each
    prompt's final argmax token (raw unembedding, or with the final norm's scale folded in)."""
    if not len(prompts):
        raise ValueError("an empty prompt set")
    tokens, enc = encode_prompts(model, prompts.texts, template=template, bos=bos)
    ps = last_token_states(model, tokens, batch_size=batch_size)
    return PDSFStates(prompts, tokens, enc, ps, directions(model, ps.predicted, fold_norm=fold_norm), fold_norm)


def run_geometry(model, st: PDSFStates, *, mode: str = "exact", k_D: int | None = None, k_S: int | None = None,
                 layers: Sequence[int] | None = None, complexity: bool = True, seed: int = 0,
                 prediction: str = "final") -> PDSFGeometry:
    """The geometry tables, each row carrying the encoding settings and the model's width.
    ``prediction``: ``final`` (the model's argmax, the authors') or ``lens`` (each state's own
    logit-lens argmax through the final norm and the unembedding)."""
    if prediction not in ("final", "lens"):
        raise ValueError(f"prediction must be 'final' or 'lens', got {prediction!r}")
    u = st.u if prediction == "final" else torch.stack(
        [directions(model, t, fold_norm=st.fold_norm) for t in st.states.lens])
    g = pdsf_geometry(st.states, u, st.prompts.groups, w_u=model.W_U.detach().float().cpu(),
                      norm_scale=final_norm_scale(model), layers=layers, k_D=k_D, k_S=k_S, mode=mode,
                      complexity=complexity, seed=seed)
    meta = {**st.settings(), "mode": mode, "prediction": prediction, "d_model": model.cfg.d_model}
    return PDSFGeometry(g.layers.assign(**meta), g.parts.assign(**meta))


def run_generation(model, st: PDSFStates, *, conditions: Sequence[str] = CONDITIONS, mode: str = "exact",
                   layer: int | None = None, max_new_tokens: int = 64, rotation: str = "haar", seed: int = 42,
                   batch_size: int = 16, log_path: str | os.PathLike | None = None,
                   progress: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(per prompt, per condition)`` tables of persistent rotations at state ``layer`` (default
    ``int(0.7 L)``), resumable condition by condition."""
    layer = default_layer(model.cfg.n_layers) if layer is None else layer
    h = st.states.states[layer]
    settings = {**st.settings(), "mode": mode, "layer": layer, "max_new_tokens": max_new_tokens,
                "rotation": rotation, "seed": seed}
    log = ResultLog(log_path, key=("stage", "condition", *settings)) if log_path else None
    key = {"stage": "base", "condition": "none", **settings}
    row = log.get(**key) if log else None
    base = torch.tensor(row["tokens"]) if row else None
    frames = []
    it = list(conditions)
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc="persistent rotations", leave=False)
    for c in it:
        ckey = {"stage": "generation", "condition": c, **settings}
        done = log.get(**ckey) if log else None
        if done is None:
            df, gens = persistent_rotations(model, st.tokens, st.prompts.groups, h, st.u, layer=layer,
                                            conditions=[c], mode=mode, max_new_tokens=max_new_tokens,
                                            batch_size=batch_size, seed=seed, rotation_kind=rotation, baseline=base)
            if base is None:
                base = gens["base"]
                if log:
                    log.add({**key, "tokens": base.tolist()})
            done = {**ckey, "rows": df.to_dict("records"), "tokens": gens[c].tolist()}
            if log:
                log.add(done)
        frames.append(pd.DataFrame(done["rows"]))
    df = pd.concat(frames, ignore_index=True).assign(**{k: v for k, v in settings.items() if k != "layer"})
    return df, divergence_summary(df).assign(layer=layer, prompt_set=st.prompts.name)
