"""The parameters of the four-geometries analysis: one frozen config, checked once."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError, OutOfRangeError, spans
from ..runner.analysis import Config, param

__all__ = ["GeometriesConfig", "QUANTITIES", "CONTROLS", "ATYPICALITY"]

# the per-token quantities, by the analysis that defines them
QUANTITIES: dict[str, tuple[str, ...]] = {
    "decomposition": ("attn_par", "mlp_par", "excl_self_par", "attn_alpha", "mlp_alpha"),
    "dirmag": ("damage_angle", "damage_magnitude"),
    "pdsf": ("P", "D", "S", "F", "lens_rank"),
    "tokenwise": ("tok_error",),
}
CONTROLS = ("position", "log_freq")
# how atypical a token's state is in the pool: controls of the second partial rho, not related pairwise themselves
# (state_norm: ||h_{l+1}||; knn_dist: mean distance of h_l to the k neighbours of its tokenwise fit;
# knn_dist_out: the same for h_{l+1}, the state PDSF splits)
ATYPICALITY = ("state_norm", "knn_dist", "knn_dist_out")


@dataclass(frozen=True)
class GeometriesConfig(Config):
    """Measure the four analyses' per-token quantities on one shared token pool (WikiText windows) at a
    few blocks, and relate them: Spearman correlations per block with a bootstrap CI over windows, the
    same after shuffling each quantity within its window, partial correlations given the token's
    position and frequency, and given those and the token's atypicality in the pool (its state's norm and its
    mean distance to its tokenwise neighbours)."""

    corpus: str = param("wikitext2", "text the token pool is cut from")
    tokens: int = param(
        2048,
        "tokens in the pool",
        atlas=768,
        cost="forwards linear in it (2 x seeds passes resumed per block); the kNN per block quadratic",
    )
    seq_len: int = param(64, "tokens per window (its first, BOS, is left out of the pool)")
    layers: tuple[int, ...] | None = param(None, "blocks measured (default: --layer-count evenly spaced)", indices=True)
    layer_count: int = param(
        6, "blocks measured when --layers is not given, evenly spaced from the second to the last", atlas=4
    )
    delta: float = param(0.2, "L2-matched perturbations: ||h' - h|| = delta ||h|| at the block's output")
    seeds: int = param(2, "perturbation draws per token (each batch draws its own)")
    k: int = param(32, "neighbours per local linear fit (tokenwise)")
    ridge: float = param(1e-3, "ridge of the local linear fits")
    n_boot: int = param(200, "bootstrap resamples of the windows per correlation CI")
    seed: int = param(0, "seed of the perturbations, the shuffles and the bootstrap", min=0)
    batch_size: int = param(8, "windows per forward")

    def validate(self) -> None:
        for name in ("tokens", "seq_len", "layer_count", "seeds", "k", "n_boot", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{name}: must be an integer >= 1, got {v!r}")
        if self.seq_len < 3:
            raise InputError(f"seq_len must be >= 3 (a BOS, a token and its successor), got {self.seq_len}")
        if not 0 < self.delta < 1:
            raise InputError(f"delta must be in (0, 1) (a share of the state's norm), got {self.delta}")
        if not self.ridge > 0:
            raise InputError(f"ridge must be > 0, got {self.ridge}")

    def chosen_layers(self, n_layers: int) -> list[int]:
        """The blocks measured: ``layers``, or ``layer_count`` evenly spaced from block 1 to the last."""
        if self.layers is not None:
            bad = [l for l in self.layers if not 0 <= l < n_layers]
            if bad:
                raise OutOfRangeError(
                    f"layer(s) {spans(bad)} out of range: the model has {n_layers} blocks (0..{n_layers - 1})"
                )
            return sorted(set(self.layers))
        first = min(1, n_layers - 1)
        count = min(self.layer_count, n_layers - first)
        return sorted({round(first + i * (n_layers - 1 - first) / max(1, count - 1)) for i in range(count)})
