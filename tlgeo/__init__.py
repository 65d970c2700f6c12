"""tlgeo: the geometry of a transformer's updates, on TransformerLens.

Analysis packages on one core (:data:`tlgeo.report.registry.ANALYSES`), each registering analysis records with
the same contract (:mod:`tlgeo.runner.analysis`: config → run → typed result). The four seed papers' packages:

* ``decomposition``: how much of each attention/MLP update is parallel to the state it
  updates (a rescaling) and how much perpendicular (a turn); edits that scale either part;
* ``dirmag``: does a state's direction or its norm carry more (L2-matched perturbations)?
* ``pdsf``: how does a state split around the model's own prediction (P, D, S, F)?
* ``tokenwise``: how much of a layer's map is a tokenwise map ``h_{l+1} ≈ A(x) x``?

plus ``patching`` (geometry-resolved activation and path patching), ``circuits`` (circuit discovery with
geometry-resolved edges), ``geometries`` (the four papers' quantities on one pool of tokens), ``compression``
(diagnosis and direction-aware objectives) and ``train`` (pretraining with parallel suppression). Edits and
perturbations are TransformerLens hooks
(:class:`tlgeo.hooks.Intervention`).

Layers (each imports only those before it; ARCHITECTURE.md): ``geometry``, ``stats`` →
``storage`` → ``data``, ``plotting``, ``families`` → ``models`` → ``hooks``, ``runner``, ``planner`` →
``evals`` → the analysis packages → ``report`` → ``cli``.
"""

import importlib

from .version import __version__  # noqa: F401

# name -> module: imported when first used, so that ``tlgeo --version`` and the light modules
# (the runner's results, provenance and cliargs) load without torch
_PUBLIC = {
    "parallel_profile": ".decomposition.observe",
    "summarize_profile": ".decomposition.observe",
    "perplexity": ".evals.perplexity",
    "evaluate_zeroshot": ".evals.zeroshot",
    "cosine": ".geometry.parallel",
    "norm_ratio": ".geometry.parallel",
    "parallel_ratio": ".geometry.parallel",
    "scale_components": ".geometry.parallel",
    "split_parallel": ".geometry.parallel",
    "expand_kv": ".geometry.value_space",
    "remove_diagonal": ".geometry.value_space",
    "scale_diagonal": ".geometry.value_space",
    "self_message": ".geometry.value_space",
    "split_self": ".geometry.value_space",
    "Edit": ".hooks.edits",
    "edit": ".hooks.edits",
    "edit_hooks": ".hooks.edits",
    "Intervention": ".hooks.intervention",
    "intervene": ".hooks.intervention",
    "DECOMPOSITION_SITES": ".hooks.sites",
    "SITES": ".hooks.sites",
    "get_site": ".hooks.sites",
    "load_model": ".models",
    "tiny_model": ".models",
}


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tlgeo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])


__all__ = [
    "Edit",
    "edit",
    "edit_hooks",
    "Intervention",
    "intervene",
    "split_parallel",
    "scale_components",
    "parallel_ratio",
    "norm_ratio",
    "cosine",
    "load_model",
    "tiny_model",
    "parallel_profile",
    "summarize_profile",
    "perplexity",
    "evaluate_zeroshot",
    "SITES",
    "DECOMPOSITION_SITES",
    "get_site",
    "expand_kv",
    "self_message",
    "split_self",
    "scale_diagonal",
    "remove_diagonal",
]
