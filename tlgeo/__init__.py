"""tlgeo: the geometry of a transformer's updates, on TransformerLens.

Four analyses on one core, each a package with the same contract (:mod:`tlgeo.analysis`:
config → run → typed result):

* ``decomposition``: how much of each attention/MLP update is parallel to the state it
  updates (a rescaling) and how much perpendicular (a turn); edits that scale either part;
* ``dirmag``: does a state's direction or its norm carry more (L2-matched perturbations)?
* ``pdsf``: how does a state split around the model's own prediction (P, D, S, F)?
* ``tokenwise``: how much of a layer's map is a tokenwise map ``h_{l+1} ≈ A(x) x``?

plus ``compression`` (diagnosis and direction-aware objectives) and ``train`` (pretraining
with parallel suppression). Edits and perturbations are TransformerLens hooks
(:class:`tlgeo.hooks.Intervention`).

Layers (each imports only those before it; ARCHITECTURE.md): ``geometry``, ``stats`` →
``data``, ``results``, ``cliargs``, ``plotting`` → ``analysis``, ``models`` → ``hooks`` →
``evals`` → the analyses → ``report`` → ``cli``.
"""

from .decomposition.observe import parallel_profile, summarize_profile
from .evals.perplexity import perplexity
from .evals.zeroshot import evaluate_zeroshot
from .geometry.parallel import cosine, norm_ratio, parallel_ratio, scale_components, split_parallel
from .geometry.value_space import expand_kv, remove_diagonal, scale_diagonal, self_message, split_self
from .hooks.edits import Edit, edit, edit_hooks
from .hooks.intervention import Intervention, intervene
from .hooks.sites import DECOMPOSITION_SITES, SITES, get_site
from .models import load_model, tiny_model

__all__ = [
    "Edit", "edit", "edit_hooks", "Intervention", "intervene",
    "split_parallel", "scale_components", "parallel_ratio", "norm_ratio", "cosine",
    "load_model", "tiny_model",
    "parallel_profile", "summarize_profile",
    "perplexity", "evaluate_zeroshot",
    "SITES", "DECOMPOSITION_SITES", "get_site",
    "expand_kv", "self_message", "split_self", "scale_diagonal", "remove_diagonal",
]
from .version import __version__  # noqa: E402
