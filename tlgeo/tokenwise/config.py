"""The parameters of the tokenwise analysis: one frozen config, checked once.

``tlgeo tokenwise``'s flags, the atlas's ``--tokenwise-*`` budgets and the keyword arguments
of :func:`tlgeo.tokenwise.analysis.tokenwise_analysis` are all this class's fields."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..runner.analysis import Config, param
from .fits import CLASSES
from .paper import POOL_TOKENS

__all__ = ["TokenwiseConfig", "DTYPES", "evenly_spaced"]

DTYPES = ("float16", "float32")


def evenly_spaced(n_layers: int, n: int) -> list[int]:
    """``n`` of ``0 .. n_layers - 1`` evenly spaced from the first to the last (all when ``n >= n_layers``)."""
    if n >= n_layers:
        return list(range(n_layers))
    return sorted({int(round(x)) for x in np.linspace(0, n_layers - 1, n)})


@dataclass(frozen=True)
class TokenwiseConfig(Config):
    """Collect every layer's token states over ``tokens`` tokens of ``corpus`` once, fit each token's
    layer map ``h_l -> h_(l+1)`` on its ``k`` nearest neighbours in restricted classes (and pool-wide
    baselines), measure the geometry of the residual per layer and class, and the KL of patching
    ``patch_tokens`` tokens to their approximation, with Spearman(error, KL)."""

    corpus: str = param("wikitext2", "text to collect states from")
    tokens: int = param(
        4096,
        f"tokens in the pool (the paper: {POOL_TOKENS}; in tlgeo atlas 0 skips the step)",
        atlas=768,
        cost="one forward of the pool; per fitted layer kNN is quadratic in it, the local fits linear",
    )
    seq_len: int = param(128, "tokens per window of the pool", atlas=64)
    layers: tuple[int, ...] | None = param(None, "layer maps to fit (all when not given)", indices=True)
    classes: tuple[str, ...] = param(
        CLASSES,
        "map classes: diag_psd, lowrank, orthogonal, linear (local fits), "
        "global, mlp (one map for the whole pool, cross-fitted)",
        atlas=("diag_psd", "orthogonal", "linear", "global"),  # no choices: validate()
        cost="per class: its fits at each fitted layer and its patched forwards",
    )
    k: int = param(32, "neighbours per local fit")
    rank: int = param(8, "rank of the lowrank class")
    exclude_sequence: bool = param(
        True,
        "exclude neighbours from the token's own window, so the fit stays "
        "tokenwise (--no-exclude-sequence: allow them)",
    )
    ridge: float = param(1e-3, "ridge of the linear, lowrank and global fits")
    energy: float = param(
        0.9,
        "share of the energy of the tokenwise updates Delta_tok that their dominant "
        "subspace holds (residual_energy: the residual's share in it)",
    )
    patch_tokens: int = param(
        256,
        "tokens patched per layer and class for the KL",
        atlas=16,
        cost="per token and class: a clean forward of its window and one resumed at each patched layer",
    )
    patch_layers: tuple[int, ...] | None = param(
        None,
        "layer maps patched for the KL (every fitted layer when neither this nor --patch-layer-count is given)",
        indices=True,
    )
    patch_layer_count: int = param(
        0,
        "how many layer maps to patch, evenly spaced from the first fitted to the last, "
        "unless patch layers are listed (0: every fitted layer; geometry: every layer)",
        min=0,
        atlas=3,
        cost="per layer and class: each patched token's window resumed at that layer",
    )
    seed: int = param(0, "seed of the patched token subset and of the bootstrap", min=0)
    fit_workers: int = param(2, "chunks of local fits run side by side (their small factorizations use one core each)")
    pool_dtype: str = param("float16", "pool storage dtype", choices=DTYPES)
    batch_size: int = param(16, "windows per forward")
    n_boot: int = param(1000, "bootstrap resamples of windows for the Spearman CIs (0: no CI)", min=0)

    def validate(self) -> None:
        bad = [c for c in self.classes if c not in CLASSES]
        if bad or not self.classes:
            raise InputError(f"unknown map class(es) {bad or list(self.classes)}; choose from {CLASSES}")
        self._check_choices()
        for name in ("tokens", "k", "rank", "fit_workers", "batch_size"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.seq_len < 2:
            raise InputError(
                f"seq_len must be at least 2 (the first position of each window is left out), got {self.seq_len}"
            )
        if self.patch_tokens < 3:
            raise InputError(f"patch_tokens must be at least 3 (a rank correlation), got {self.patch_tokens}")
        if min(self.patch_layer_count, self.seed, self.n_boot) < 0:
            raise InputError("patch_layer_count, seed and n_boot must be non-negative")
        if not 0 < self.energy <= 1:
            raise InputError(f"energy must be in (0, 1], got {self.energy}")
        if self.ridge < 0:
            raise InputError(f"ridge must be non-negative, got {self.ridge}")
        for name in ("layers", "patch_layers"):
            v = getattr(self, name)
            if v is not None and (not v or min(v) < 0):
                raise InputError(f"{name} must be non-negative layer indices, got {list(v)}")
        if self.layers is not None and self.patch_layers is not None:
            self._check_patch(list(self.layers), sorted(set(self.patch_layers)))

    @staticmethod
    def _check_patch(layers: list[int], patch: list[int]) -> None:
        if not patch or not set(patch) <= set(layers):
            raise InputError(f"patch_layers {patch} must be a non-empty subset of the fitted layers {layers}")

    def check_shape(self, shape) -> None:
        """The fitted and patched layer maps inside the model (``shape``: its blocks, one map each, from its
        config), before its weights load."""
        self.patched_layers(shape.n_layers)

    def fitted_layers(self, n_maps: int) -> list[int]:
        """The fitted layer maps of a model (or pool) with ``n_maps`` of them, in the given order."""
        layers = list(range(n_maps)) if self.layers is None else list(self.layers)
        out_of_range = [l for l in layers if not 0 <= l < n_maps]
        if out_of_range:
            raise InputError(f"layers {out_of_range} out of range: the pool has layer maps 0..{n_maps - 1}")
        return layers

    def patched_layers(self, n_maps: int) -> list[int]:
        """The patched layer maps: ``patch_layers`` (sorted), else ``patch_layer_count`` evenly spaced
        fitted ones (sorted), else every fitted one (in the order of ``layers``)."""
        layers = self.fitted_layers(n_maps)
        if self.patch_layers is not None:
            patch = sorted(set(self.patch_layers))
        elif self.patch_layer_count:
            patch = sorted(layers[i] for i in evenly_spaced(len(layers), self.patch_layer_count))
        else:
            patch = layers
        self._check_patch(layers, patch)
        return patch

    def pool_name(self, identity_key: str, inputs: str) -> str:
        """The pool's folder name inside the output folder (``tlgeo tokenwise``'s), for the model of
        ``identity_key`` (:attr:`tlgeo.runner.identity.RunIdentity.key`: two models' pools never share a folder) and the
        windows of digest ``inputs`` (:func:`tlgeo.runner.results.content_digest`: a corpus file changed under its
        name gets a pool of its own)."""
        return (
            f"tokenwise_pool-{self.corpus}-t{self.tokens}-s{self.seq_len}-{self.pool_dtype}-{identity_key}-{inputs[:8]}"
        ).replace("/", "_")
