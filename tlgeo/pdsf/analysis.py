"""The PDSF analysis of one model: the geometry of a prompt set at every layer, and persistent
rotations during generation; each records how the prompts were encoded.

* :func:`pdsf_states`: encode a prompt set, collect its last-token states and prediction
  directions (one forward per batch);
* :func:`run_geometry`: :func:`tlgeo.pdsf.geometry.pdsf_geometry` on them;
* :func:`run_single_pass`: :func:`tlgeo.pdsf.single_pass.single_pass` (one forward per edit);
* :func:`run_generation`: :func:`tlgeo.pdsf.interventions.persistent_rotations`, one condition
  at a time, each finished condition (and the unedited continuations, and the static/dynamic
  split of F along them, :func:`tlgeo.pdsf.dynamics.f_dynamics`) a line of the resume log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import pandas as pd
import torch

from ..results import ResultLog
from .dynamics import f_dynamics
from .geometry import PDSFGeometry, pdsf_geometry
from .interventions import (CONDITIONS, default_layer, divergence_summary, frame_shift_base_rate, frame_shifts,
                            persistent_rotations)
from .single_pass import DEFAULT_SINGLE_PASS, single_pass, single_pass_layer, single_pass_summary
from .prompts import Encoding, PromptSet, encode_prompts
from .states import PromptStates, directions, final_norm_scale, last_token_states

KL_CACHE_BYTES = 2 * 2**30

__all__ = ["PDSFStates", "pdsf_states", "run_geometry", "run_single_pass", "SinglePassResult", "run_generation",
           "GenerationResult"]


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


@dataclass
class SinglePassResult:
    """``rows``: one per condition, prompt and repeat; ``angles``: the mean angle per condition and
    later state; ``summary``: one row per condition."""

    rows: pd.DataFrame
    angles: pd.DataFrame
    summary: pd.DataFrame


def run_single_pass(model, st: PDSFStates, *, conditions: Sequence[str] = DEFAULT_SINGLE_PASS, mode: str = "exact",
                    layer: int | None = None, alpha: float = 0.5, repeats: int = 3, rotation: str = "haar",
                    seed: int = 42, batch_size: int = 16) -> SinglePassResult:
    """Single-pass edits at state ``layer`` (default the authors' ``max(1, int(0.15 L))``) of the
    prompts' last token, every table carrying the settings."""
    layer = single_pass_layer(model.cfg.n_layers) if layer is None else layer
    if not 1 <= layer <= model.cfg.n_layers:
        raise ValueError(f"layer {layer} out of range: states 1..{model.cfg.n_layers} can be edited")
    rows, angles = single_pass(model, st.tokens, st.prompts.groups, st.states.states[layer], st.u, layer=layer,
                               conditions=conditions, mode=mode, alpha=alpha, repeats=repeats, seed=seed,
                               rotation_kind=rotation, batch_size=batch_size)
    meta = {**st.settings(), "mode": mode, "layer": layer, "alpha": alpha, "repeats": repeats, "rotation": rotation,
            "seed": seed}
    return SinglePassResult(rows.assign(**{k: v for k, v in meta.items() if k != "layer"}), angles.assign(**meta),
                            single_pass_summary(rows).assign(**meta))


@dataclass
class GenerationResult:
    """``rows``: one per condition and prompt; ``summary``: one per condition; ``dynamics``: the
    static/dynamic split of F along the unedited continuations, per layer, and ``steps``:
    ``cos(F_t, F_0)`` per step."""

    rows: pd.DataFrame
    summary: pd.DataFrame
    dynamics: pd.DataFrame
    steps: pd.DataFrame


def run_generation(model, st: PDSFStates, *, conditions: Sequence[str] = CONDITIONS, mode: str = "exact",
                   layer: int | None = None, max_new_tokens: int = 64, rotation: str = "haar", seed: int = 42,
                   batch_size: int = 16, log_path: str | os.PathLike | None = None,
                   progress: bool = False) -> GenerationResult:
    """Persistent rotations at state ``layer`` (default ``int(0.7 L)``), resumable condition by
    condition, and the static/dynamic split of F along the unedited continuations (which gives
    the ``F_dynamic`` condition its basis at ``layer``)."""
    layer = default_layer(model.cfg.n_layers) if layer is None else layer
    h = st.states.states[layer]
    settings = {**st.settings(), "mode": mode, "layer": layer, "max_new_tokens": max_new_tokens,
                "rotation": rotation, "seed": seed}
    log = ResultLog(log_path, key=("stage", "condition", *settings)) if log_path else None
    key = {"stage": "base", "condition": "none", **settings}
    row = log.get(**key) if log else None
    base = torch.tensor(row["tokens"]) if row else None
    if base is None:
        from .generation import greedy_continuations

        base = greedy_continuations(model, st.tokens, max_new_tokens, batch_size=batch_size)
        if log:
            log.add({**key, "tokens": base.tolist()})
    dkey = {"stage": "dynamics", "condition": "none", **settings}
    drow = log.get(**dkey) if log else None
    basis = None
    if drow is None or "F_dynamic" in conditions:
        dyn = f_dynamics(model, st.tokens, base, st.states.states, st.u, mode=mode, basis_layer=layer,
                         batch_size=batch_size)
        basis = dyn.basis
        if drow is None:
            drow = {**dkey, "layers": dyn.layers.to_dict("records"), "steps": dyn.steps.to_dict("records")}
            if log:
                log.add(drow)
    base_text = [model.tokenizer.decode(t) for t in base]
    # the clean teacher-forced log-probabilities, shared by the conditions where they fit in 2 GiB
    vocab = model.cfg.d_vocab
    kl_cache = {} if len(st.tokens) * max_new_tokens * vocab * 4 <= KL_CACHE_BYTES else None
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
                                            batch_size=batch_size, seed=seed, rotation_kind=rotation, baseline=base,
                                            f_dynamic=basis if c == "F_dynamic" else None, kl_cache=kl_cache)
            done = {**ckey, "rows": df.to_dict("records"), "tokens": gens[c].tolist()}
            if log:
                log.add(done)
        rows = pd.DataFrame(done["rows"])
        # the frame-shift proxy from the stored continuations (so logs of earlier definitions agree)
        rows["frame_shift"] = frame_shifts(base_text, [model.tokenizer.decode(t) for t in done["tokens"]],
                                           st.prompts.groups)[rows["prompt"].to_numpy()]
        frames.append(rows)
    df = pd.concat(frames, ignore_index=True).assign(**{k: v for k, v in settings.items() if k != "layer"})
    meta = {k: v for k, v in settings.items() if k not in ("layer", "mode")}
    base_rate = frame_shift_base_rate(base_text, st.prompts.groups)
    summary = divergence_summary(df).assign(**settings, frame_shift_base_pct=100 * base_rate)
    return GenerationResult(df, summary,
                            pd.DataFrame(drow["layers"]).assign(**meta), pd.DataFrame(drow["steps"]).assign(**meta))
