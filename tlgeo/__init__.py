"""tlgeo: the directional geometry of transformer updates, on TransformerLens.

How much of each attention/MLP update is parallel to the state it updates
(a rescaling) and how much is perpendicular (a change of direction); edits that
scale either part, as TransformerLens hooks.

Layers (each imports only those before it in this list; ARCHITECTURE.md):
``geometry``, ``stats`` (pure math) → ``data``, ``models``, ``results``, ``pipeline``,
``plotting`` → ``hooks`` → ``evals`` → analyses (``decomposition``, ``compression``, ``train``, ``dirmag``)
→ ``report`` → ``cli``.
"""

from .decomposition.observe import parallel_profile, summarize_profile
from .evals.perplexity import perplexity
from .evals.zeroshot import evaluate_zeroshot
from .geometry.parallel import cosine, norm_ratio, parallel_ratio, scale_components, split_parallel
from .geometry.value_space import expand_kv, remove_diagonal, scale_diagonal, self_message, split_self
from .hooks.edits import Edit, edit, edit_hooks
from .hooks.sites import DECOMPOSITION_SITES, SITES, get_site
from .models import load_model, tiny_model

__all__ = [
    "Edit", "edit", "edit_hooks",
    "split_parallel", "scale_components", "parallel_ratio", "norm_ratio", "cosine",
    "load_model", "tiny_model",
    "parallel_profile", "summarize_profile",
    "perplexity", "evaluate_zeroshot",
    "SITES", "DECOMPOSITION_SITES", "get_site",
    "expand_kv", "self_message", "split_self", "scale_diagonal", "remove_diagonal",
]
__version__ = "0.1.0"
