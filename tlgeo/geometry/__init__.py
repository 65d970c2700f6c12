"""Pure tensor math: no model, no hooks, no TransformerLens.

Every function takes and returns tensors (shapes in the signatures) and computes
in float32 or float64 whatever the input dtype; each is tested on float64 tensors.

* :mod:`.parallel`: the parallel/perpendicular split of an update ``y`` against a
  reference ``r`` (``split_parallel``), component scaling (``scale_components``,
  ``scaled_delta``) and the ratios built on them.
* :mod:`.value_space`: attention's value aggregation: the self message
  ``A_tt v_t``, GQA head expansion, diagonal scaling of a pattern.
"""

from .parallel import (
    EPS, Scale, Split, check_scale, compute_dtype, cosine, is_unit, norm_ratio, parallel_ratio,
    scale_components, scaled_delta, split_parallel,
)
from .value_space import (
    expand_kv, group_heads, kv_head_index, pattern_entropy, remove_diagonal, scale_diagonal, self_message,
    self_weights,
    split_self,
)

__all__ = [
    "EPS", "Split", "Scale", "check_scale", "compute_dtype", "split_parallel", "scaled_delta", "is_unit",
    "scale_components", "parallel_ratio", "norm_ratio", "cosine",
    "kv_head_index", "expand_kv", "group_heads", "self_weights", "self_message", "split_self",
    "scale_diagonal", "remove_diagonal", "pattern_entropy",
]
