"""Where the math meets the model: sites, the one hook adapter, edits, resumed forwards.

* :mod:`.sites`: the site registry. A :class:`~.sites.Site` names the hook it
  edits, the hooks it reads earlier in the same forward, and how to get the
  update ``y`` and its reference ``r`` from them.
* :mod:`.adapter`: turns a site plus a pure function into TransformerLens
  ``(name, hook_fn)`` pairs (:func:`~.adapter.site_hooks`), resolves layers and
  heads, checks hook names; :class:`~.adapter.HookList` removes hooks after an
  exception.
* :mod:`.edits`: :class:`~.edits.Edit` (scale the parallel and perpendicular
  parts at a site), :func:`~.edits.edit` (a context manager).
* :mod:`.resume`: :func:`~.resume.resume_forward`, a forward that starts at
  block L from a cached residual.
* :mod:`.intervention`: :class:`~.intervention.Intervention`, the protocol every hook-based
  intervention implements (``.hooks(model) -> HookList``), and :func:`~.intervention.intervene`,
  a context manager that applies any of them.
* :mod:`.subspace`: :class:`~.subspace.SubspaceEdit`, rotations (or scalings, replacements)
  inside a subspace at a block's output, per batch row, for generation loops.
"""

from .adapter import HookList, check_hook_names, resolve_heads, resolve_layers, site_hooks
from .edits import Edit, edit, edit_hooks, scale_update
from .intervention import Intervention, hooks_of, intervene
from .perturbation import Perturbation
from .resume import resume_forward
from .subspace import ComplementEdit, SubspaceEdit, subspace_edit
from .sites import DECOMPOSITION_SITES, SITES, Site, UnknownSiteError, Update, get_site

__all__ = [
    "Site",
    "Update",
    "SITES",
    "DECOMPOSITION_SITES",
    "get_site",
    "UnknownSiteError",
    "HookList",
    "site_hooks",
    "resolve_layers",
    "resolve_heads",
    "check_hook_names",
    "Intervention",
    "intervene",
    "hooks_of",
    "Edit",
    "edit",
    "edit_hooks",
    "scale_update",
    "resume_forward",
    "Perturbation",
    "SubspaceEdit",
    "ComplementEdit",
    "subspace_edit",
]
