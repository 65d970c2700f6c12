"""Prediction-anchored subspaces (PDSF, seed paper 001): how does a state split around the model's own
prediction, into P (the unembedding direction of the predicted token), PCA subspaces D and S around it
and the complement F, and what do edits of each part do to the next token and to generation?

* :mod:`.config`: :class:`PDSFConfig`, every parameter (``tlgeo pdsf``'s flags, the atlas budgets);
* :mod:`.analysis`: ``run(model, PDSFConfig(...)) -> PDSFResult`` (geometry, single pass,
  generation; units, resume logs), and the stage functions :func:`pdsf_states`,
  :func:`run_geometry`, :func:`run_single_pass`, :func:`run_generation`;
* :mod:`.prompts`: the paper's prompt sets (``<data>/pdsf_prompts``) and how they are encoded;
* :mod:`.states`: last-token states at every layer, prediction directions;
* :mod:`.layer_stats`: the geometry step per layer and part: ranks, energies, participation ratios, angles, readout,
  manifold complexity, group discrimination;
* :mod:`.generation`: batched greedy continuations with the KV cache, divergence, KL;
* :mod:`.single_pass`: one edit at the last prompt token (rotate, attenuate, transplant, mix);
* :mod:`.interventions`: persistent rotations inside D, S, the top of F, its dynamic part or a
  random subspace;
* :mod:`.dynamics`: the static and dynamic parts of F along the generated continuations;
* :mod:`.paper`: the paper's reference numbers;
* :mod:`.plots`: the figures; :mod:`.atlas`: the ``pdsf`` step of ``tlgeo atlas``;
  :mod:`.cli`: ``tlgeo pdsf``.

The math is in :mod:`tlgeo.geometry.subspaces`, :mod:`tlgeo.geometry.rotation`,
:mod:`tlgeo.geometry.manifold` and :mod:`tlgeo.stats.discrimination`; the hook in
:mod:`tlgeo.hooks.subspace`.
"""

from .analysis import (
    GenerationResult,
    PDSFResult,
    PDSFStates,
    SinglePassResult,
    pdsf_states,
    run_generation,
    run_geometry,
    run_single_pass,
)
from .analysis import run as run_pdsf
from .config import PDSFConfig
from .dynamics import FDynamics, dynamic_basis, f_dynamics
from .generation import divergence_step, greedy_continuations, teacher_forced_kl
from .layer_stats import PDSFGeometry, pdsf_geometry
from .interventions import CONDITIONS, condition_bases, default_layer, divergence_summary, persistent_rotations
from .prompts import PROMPT_SETS, PromptSet, encode_prompts, load_prompt_set
from .single_pass import (
    DEFAULT_SINGLE_PASS,
    SINGLE_PASS,
    next_group_donors,
    single_pass,
    single_pass_layer,
    single_pass_summary,
)
from .states import PromptStates, directions, final_norm_scale, last_token_states, logit_lens

__all__ = [
    "PDSFConfig",
    "PDSFResult",
    "run_pdsf",
    "GenerationResult",
    "SinglePassResult",
    "run_single_pass",
    "FDynamics",
    "dynamic_basis",
    "f_dynamics",
    "DEFAULT_SINGLE_PASS",
    "SINGLE_PASS",
    "next_group_donors",
    "single_pass",
    "single_pass_layer",
    "single_pass_summary",
    "PDSFStates",
    "pdsf_states",
    "run_generation",
    "run_geometry",
    "divergence_step",
    "greedy_continuations",
    "teacher_forced_kl",
    "PDSFGeometry",
    "pdsf_geometry",
    "CONDITIONS",
    "condition_bases",
    "default_layer",
    "divergence_summary",
    "persistent_rotations",
    "PROMPT_SETS",
    "PromptSet",
    "encode_prompts",
    "load_prompt_set",
    "PromptStates",
    "directions",
    "final_norm_scale",
    "last_token_states",
    "logit_lens",
]
