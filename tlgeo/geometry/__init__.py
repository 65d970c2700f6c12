"""Pure tensor math: no model, no hooks, no TransformerLens.

Every function takes and returns tensors (shapes in the signatures) and computes
in float32 or float64 whatever the input dtype; each is tested on float64 tensors.

* :mod:`.parallel`: the parallel/perpendicular split of an update ``y`` against a
  reference ``r`` (``split_parallel``), component scaling (``scale_components``,
  ``scaled_delta``) and the ratios built on them.
* :mod:`.value_space`: attention's value aggregation: the self message
  ``A_tt v_t``, GQA head expansion, diagonal scaling of a pattern.
* :mod:`.perturb`: L2-matched magnitude and angle perturbations.
* :mod:`.neighbours`: exact chunked kNN of token states (leave-one-out, same-sequence exclusion).
* :mod:`.local_maps`: local tokenwise maps ``T(x) = A x`` fitted on a neighbourhood (four classes).
* :mod:`.tokenwise`: the geometry of a tokenwise approximation of a layer's update.
* :mod:`.subspaces`: prediction-anchored subspaces (PDSF): P, D, S, F, participation ratios.
* :mod:`.rotation`: rotate, attenuate or replace the coordinates inside a subspace.
* :mod:`.manifold`: curvature ratio, local/global participation ratio, TwoNN dimension.
* :mod:`.head_scores`: what a head does, from its pattern and its OV circuit (previous-token, induction and
  copying scores; Olsson et al. 2022).
* :mod:`.patch_parts`: the part of an activation a patch copies (whole, parallel, perpendicular; a head's
  self message and the rest).
"""

from .parallel import (
    EPS,
    Scale,
    Split,
    check_scale,
    compute_dtype,
    cosine,
    is_unit,
    norm_ratio,
    parallel_ratio,
    scale_components,
    scaled_delta,
    split_parallel,
)
from .local_maps import LOCAL_MAPS, fit_local, fit_locals, global_linear, local_matrix, tokenwise_fit, tokenwise_fits
from .rotation import (
    attenuate_in_subspace,
    haar_rotation,
    qr_rotation,
    random_basis,
    replace_in_subspace,
    rotate_in_subspace,
)
from .subspaces import (
    PARTS,
    PDSFBasis,
    energy_shares,
    fit_pdsf,
    participation_ratio,
    pca_basis,
    prediction_directions,
    split_pdsf,
)
from .neighbours import knn
from .update_split import UpdateGeometry, dominant_basis, update_geometry
from .value_space import (
    expand_kv,
    group_heads,
    kv_head_index,
    pattern_entropy,
    remove_diagonal,
    scale_diagonal,
    self_message,
    self_weights,
    split_self,
)

__all__ = [
    "EPS",
    "Split",
    "Scale",
    "check_scale",
    "compute_dtype",
    "split_parallel",
    "scaled_delta",
    "is_unit",
    "scale_components",
    "parallel_ratio",
    "norm_ratio",
    "cosine",
    "kv_head_index",
    "expand_kv",
    "group_heads",
    "self_weights",
    "self_message",
    "split_self",
    "scale_diagonal",
    "remove_diagonal",
    "pattern_entropy",
    "knn",
    "LOCAL_MAPS",
    "fit_local",
    "fit_locals",
    "local_matrix",
    "global_linear",
    "tokenwise_fit",
    "tokenwise_fits",
    "PARTS",
    "PDSFBasis",
    "prediction_directions",
    "participation_ratio",
    "pca_basis",
    "fit_pdsf",
    "split_pdsf",
    "energy_shares",
    "haar_rotation",
    "qr_rotation",
    "random_basis",
    "rotate_in_subspace",
    "attenuate_in_subspace",
    "replace_in_subspace",
    "UpdateGeometry",
    "dominant_basis",
    "update_geometry",
]
