"""The parameters of the direction-vs-magnitude analysis: one frozen config, checked once.

``tlgeo dirmag``'s flags, the atlas's ``--dirmag-*`` budgets and the notebook's keyword
arguments are all this class's fields."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..runner.analysis import Config, param
from ..hooks.perturbation import KINDS
from .engine import SweepGrid
from .paper import PAPER_DELTAS

__all__ = ["DirmagConfig", "PARTS"]

PARTS = ("damage", "blimp", "repair", "entropy", "probes")


@dataclass(frozen=True)
class DirmagConfig(Config):
    """Move every token state of the chosen blocks by ``delta``, along itself (magnitude) or by
    turning it (angle); measure the loss damage and, where their sizes are not 0, BLiMP
    agreement, causal repair, attention entropy and probes of the direction vs the norm."""

    sentences: int = param(
        0,
        "first n of the 281 WikiText sentences (0 = all)",
        min=0,
        atlas=48,
        cost="linear: a clean pass and one per perturbation (kind x delta x seed) resumed at the first perturbed block",
    )
    sentence_corpus: str | None = param(
        None,
        "take the sentences from the last --sentence-tail of this corpus "
        "instead of WikiText (e.g. austen,mobydick,bible: held out by tlgeo "
        "train)",
    )
    sentence_tail: float = param(0.01, "share of each --sentence-corpus read (its end)")
    deltas: tuple[float, ...] | None = param(
        None,
        "displacements (default: --absolute-deltas and --norm-fractions x "
        "the median state norm; with --relative 0.05,0.1,0.25,0.5,1)",
        item=float,
    )
    absolute_deltas: tuple[float, ...] = param(
        PAPER_DELTAS,
        "without --deltas: the absolute part of the grid (the paper's 1,2,5,10,15,20; '' for none)",
        atlas=(5.0,),
        cost="per delta: a resumed pass of the sentences (and BLiMP pairs) per kind and seed",
    )
    norm_fractions: tuple[float, ...] = param(
        (0.25, 0.5, 1.0),
        "without --deltas: deltas as fractions of the clean median state norm",
        atlas=(0.25, 1.0),
        cost="per fraction: a resumed pass of the sentences (and BLiMP pairs) per kind and seed",
    )
    relative: bool = param(False, "deltas as fractions of each token's norm")
    kinds: tuple[str, ...] = param(KINDS, "perturbation kinds", choices=KINDS)
    seeds: int = param(
        5,
        "perturbation seeds 42, 43, ... (the notebook: 5)",
        atlas=1,
        cost="per seed: a resumed pass of the sentences (and BLiMP pairs, repair, entropy) per kind and delta",
    )
    layers: tuple[int, ...] | None = param(None, "perturbed blocks (default: the middle third)", indices=True)
    mode: str = param(
        "exact",
        "exact: every token moves by delta; faithful: the reference notebook's perturbation",
        choices=("exact", "faithful"),
    )
    flip: str = param(
        "allow",
        "magnitude shrinks larger than the norm: flip h (the notebook), stop at 0, or grow instead",
        choices=("allow", "clip", "grow"),
    )
    max_tokens: int = param(64, "tokens per sentence")
    blimp_pairs: int = param(
        0,
        "BLiMP agreement pairs of each of its 6 paradigms under the perturbations (0 = skip)",
        min=0,
        atlas=8,
        cost="per pair (x 6 paradigms): two sentences, a clean pass and a resumed pass per perturbation",
    )
    repair_sentences: int = param(
        0, "causal repair (attention / norm outputs made clean) on the first n sentences (0 = skip)", min=0
    )
    repair_deltas: tuple[float, ...] = param((5.0,), "deltas of the repair and entropy runs", item=float)
    repair_layers: tuple[int, ...] | None = param(
        None,
        "blocks whose attention / norm outputs are made clean "
        "(default: the perturbed ones, as the paper; with one "
        "perturbed block, give the blocks after it)",
        indices=True,
    )
    entropy_sentences: int = param(
        0, "attention entropy, clean vs perturbed, on the first n sentences (0 = skip)", min=0
    )
    probe_sentences: int = param(
        0,
        "probes of part of speech and depth on the direction vs the magnitude: trained "
        "on the first n UD EWT dev sentences, scored on the first n test sentences "
        "(0 = skip)",
        min=0,
        atlas=48,
        cost="linear: a forward per sentence, and the probes' host fits at each probed block",
    )
    probe_layers: tuple[int, ...] | None = param(
        None, "probed blocks (default: --probe-layer-count evenly spaced)", indices=True
    )
    probe_layer_count: int = param(
        10,
        "without --probe-layers: probed blocks, evenly spaced from the first to the last",
        atlas=4,
        cost="per block: the probes' host fits (one forward serves every block)",
    )
    batch_size: int = param(16, "sentences per forward (faithful: 1)")

    def check_shape(self, shape) -> None:
        """The perturbed, repaired and probed blocks inside the model (``shape``: its blocks, from its config),
        before its weights load."""
        self.grid().chosen_layers(shape)  # a perturbed block out of range raises, naming the model's blocks
        for name in ("repair_layers", "probe_layers"):
            bad = [l for l in (getattr(self, name) or ()) if not 0 <= l < shape.n_layers]
            if bad:
                raise InputError(
                    f"{name.replace('_', ' ')} {bad} out of range: the model has blocks 0..{shape.n_layers - 1}"
                )

    def validate(self) -> None:
        self._check_choices()
        if not 0 < self.sentence_tail <= 1:
            raise InputError(f"sentence_tail must be in (0, 1], got {self.sentence_tail}")
        self.grid()  # deltas, kinds, seeds, mode and flip

    def grid(self, **only) -> SweepGrid:
        """The perturbation grid of the damage and BLiMP runs."""
        return SweepGrid(
            kinds=self.kinds,
            deltas=self.deltas,
            seeds=self.seeds,
            layers=self.layers,
            mode=self.mode,
            relative=self.relative,
            flip=self.flip,
            absolute=self.absolute_deltas,
            norm_fractions=self.norm_fractions,
            **only,
        )

    def parts(self) -> tuple[str, ...]:
        """The measurements this config asks for (``damage`` always)."""
        sizes = {
            "damage": 1,
            "blimp": self.blimp_pairs,
            "repair": self.repair_sentences,
            "entropy": self.entropy_sentences,
            "probes": self.probe_sentences,
        }
        return tuple(p for p in PARTS if sizes[p])
