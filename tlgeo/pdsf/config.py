"""The parameters of the PDSF analysis: one frozen config, checked once.

``tlgeo pdsf``'s flags, the atlas's ``--pdsf-*`` budgets and the keyword arguments of
:func:`tlgeo.pdsf.analysis.run` are all this class's fields."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..runner.analysis import Config, param
from ..models import Model
from .interventions import CONDITIONS
from .prompts import PromptSet, load_prompt_set
from .single_pass import DEFAULT_SINGLE_PASS, SINGLE_PASS

__all__ = ["PDSFConfig", "STAGES"]

STAGES = ("geometry", "single_pass", "generation")


def _known(field: str, items: tuple, allowed: tuple, what: str) -> None:
    bad = [x for x in items if x not in allowed]
    if bad:
        raise InputError(f"{field}: unknown {what} {bad}; choose from {tuple(allowed)}")


@dataclass(frozen=True)
class PDSFConfig(Config):
    """Split each prompt's last-token state into P (on the unembedding of its predicted token),
    D and S (PCA subspaces around it) and the complement F at every layer of a prompt set; edit
    D, S and F once at the last prompt token; rotate D, S, the top of F, its dynamic part or a
    random subspace persistently while generating."""

    prompts: str = param(
        "specA", "prompt set of the geometry and the single-pass edits", choices=("specA", "specB", "diverse")
    )
    template: str = param(
        "raw",
        "raw text (the authors, for models they do not template) or the tokenizer's chat template",
        choices=("raw", "chat"),
    )
    bos: str = param(
        "auto",
        "prepend BOS (auto: as the model's to_tokens; the authors' plain HF load of SmolLM2: no)",
        choices=("auto", "yes", "no"),
    )
    mode: str = param(
        "exact", "exact: parts orthogonal per state; faithful: the authors' shared bases", choices=("exact", "faithful")
    )
    fold_norm: bool = param(False, "fold the final norm's scale into u_hat")
    prediction: str = param(
        "final",
        "u_hat of the model's final argmax (the authors) or of each layer's logit-lens argmax",
        choices=("final", "lens"),
    )
    k_d: int | None = param(None, "rank of D (default: round(PR) in [2, 12])")
    k_s: int | None = param(None, "rank of S (default: round(PR) in [4, 16])")
    layers: tuple[int, ...] | None = param(None, "states 0..L to analyse (default: all)", indices=True)
    complexity: bool = param(True, "curvature ratio, local PR and TwoNN of each part (--no-complexity: skip them)")
    geometry_per_group: int | None = param(
        None,
        "prompts per group of the geometry set (SpecA has 16 per group, 224 in all; 0: skip the geometry; unset: all)",
        min=0,
        atlas=12,
        cost="per prompt: its forward and host fits at each state",
    )
    single_pass: tuple[str, ...] = param(
        DEFAULT_SINGLE_PASS,
        "single-pass edits of the last prompt token: " + ", ".join(SINGLE_PASS) + ", or none",
        item=str,
    )
    single_pass_per_group: int | None = param(
        None,
        "prompts per group of the geometry set edited once at the last token (0: skip; unset: the geometry's prompts)",
        min=0,
        atlas=1,
        cost="per prompt: a clean forward and one per condition (x --repeats for rotate / mix)",
    )
    single_pass_layer: int | None = param(
        None, "state of the single-pass edits (default: the authors' max(1, int(0.15 L)))"
    )
    alpha: float = param(0.5, "attenuation: the part scaled by 1 - alpha")
    repeats: int = param(3, "rotations / mixes per prompt (the authors: 3)")
    generate: str = param(
        "specB", "prompt set of the persistent rotations (none: no generation)", choices=("specB", "diverse", "none")
    )
    per_group: int | None = param(
        None,
        "prompts per group of the generation set (SpecB has 8 per group; 0: skip the generation; unset: all)",
        min=0,
        atlas=1,
        cost="per prompt: a KV-cached step per new token, unedited and per condition, "
        "then a teacher-forced pass of each",
    )
    conditions: tuple[str, ...] = param(
        CONDITIONS, "subspaces rotated during generation: " + ", ".join(CONDITIONS), item=str
    )
    new_tokens: int = param(64, "tokens generated per prompt (the paper: 64)", atlas=32)
    edit_layer: int | None = param(None, "state rotated during generation (default: int(0.7 L))")
    rotation: str = param("haar", "haar, or the authors' QR", choices=("haar", "qr"))
    seed: int = param(42, "seed of the rotations (seed + i for prompt i), random subspaces and mixes", min=0)
    batch_size: int = param(16, "prompts per forward")

    def __post_init__(self) -> None:
        for name, default in (("conditions", CONDITIONS), ("single_pass", DEFAULT_SINGLE_PASS)):
            v = getattr(self, name)
            if isinstance(v, str):
                v = tuple(x for x in v.split(",") if x)
            object.__setattr__(self, name, tuple(v) if v else default)  # empty: the default, as the old flags
        super().__post_init__()

    def validate(self) -> None:
        self._check_choices()
        _known("conditions", self.conditions, CONDITIONS, "subspace(s)")
        if self.single_pass != ("none",):
            _known("single_pass", self.single_pass, SINGLE_PASS, "single-pass condition(s)")
        for name in ("k_d", "k_s", "single_pass_layer", "edit_layer"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise InputError(f"{name} must be a positive integer, got {v}")
        for name in ("geometry_per_group", "single_pass_per_group", "per_group"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise InputError(f"{name} must be a non-negative integer (0: skip), got {v}")
        if self.geometry_per_group == 1:
            raise InputError(
                "geometry_per_group 1: the groups' discrimination (a silhouette over the prompt groups) "
                "needs at least 2 prompts per group; give 2 or more (0 skips the geometry)"
            )
        for name in ("repeats", "batch_size", "new_tokens"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.seed < 0:
            raise InputError(f"seed must be a non-negative integer, got {self.seed}")
        if self.layers is not None and (not self.layers or min(self.layers) < 0):
            raise InputError(f"layers must be state indices 0..L, got {list(self.layers)}")
        if self.stage_runs("generation") and self.new_tokens < 2:
            raise InputError(f"new_tokens must be at least 2 (the static/dynamic split of F), got {self.new_tokens}")

    # ------------------------------------------------------------------ stages and their inputs

    def single_pass_conditions(self) -> tuple[str, ...]:
        """The single-pass conditions that run (none when skipped)."""
        return () if self.single_pass == ("none",) or self.single_pass_per_group == 0 else self.single_pass

    def generation_conditions(self) -> tuple[str, ...]:
        """The generation conditions that run (none when skipped)."""
        return () if self.generate == "none" or self.per_group == 0 else self.conditions

    def stage_runs(self, stage: str) -> bool:
        if stage == "geometry":
            return self.geometry_per_group != 0
        if stage == "single_pass":
            return bool(self.single_pass_conditions())
        if stage == "generation":
            return bool(self.generation_conditions())
        raise InputError(f"unknown stage {stage!r}; choose from {STAGES}")

    def bos_flag(self) -> bool | None:
        """``bos`` for :func:`tlgeo.pdsf.prompts.encode_prompts` (``None``: the model's default)."""
        return None if self.bos == "auto" else self.bos == "yes"

    def encoding(self) -> dict[str, Any]:
        """The keyword arguments of :func:`tlgeo.pdsf.analysis.pdsf_states`."""
        return dict(template=self.template, bos=self.bos_flag(), fold_norm=self.fold_norm, batch_size=self.batch_size)

    def geometry_prompts(self) -> PromptSet:
        return _take(load_prompt_set(self.prompts), self.geometry_per_group or None)

    def single_pass_prompts(self) -> PromptSet:
        k = self.single_pass_per_group if self.single_pass_per_group is not None else (self.geometry_per_group or None)
        return _take(load_prompt_set(self.prompts), k)

    def single_pass_shares_geometry_prompts(self) -> bool:
        """Whether the single-pass edits run on exactly the geometry's prompts (then their states are shared)."""
        return self.single_pass_per_group is None or self.single_pass_per_group == self.geometry_per_group

    def generation_prompts(self) -> PromptSet:
        return _take(load_prompt_set(self.generate), self.per_group or None)

    def geometry_args(self) -> dict[str, Any]:
        """The keyword arguments of :func:`tlgeo.pdsf.analysis.run_geometry`."""
        return dict(
            mode=self.mode,
            k_D=self.k_d,
            k_S=self.k_s,
            layers=None if self.layers is None else list(self.layers),
            complexity=self.complexity,
            prediction=self.prediction,
        )

    def single_pass_args(self) -> dict[str, Any]:
        """The keyword arguments of :func:`tlgeo.pdsf.analysis.run_single_pass` (but the conditions)."""
        return dict(
            mode=self.mode,
            layer=self.single_pass_layer,
            alpha=self.alpha,
            repeats=self.repeats,
            rotation=self.rotation,
            seed=self.seed,
            batch_size=self.batch_size,
        )

    def generation_args(self) -> dict[str, Any]:
        """The keyword arguments of :func:`tlgeo.pdsf.analysis.run_generation` (but the conditions)."""
        return dict(
            mode=self.mode,
            layer=self.edit_layer,
            max_new_tokens=self.new_tokens,
            rotation=self.rotation,
            seed=self.seed,
            batch_size=self.batch_size,
        )

    def check(self, model: Model) -> None:
        """The checks that need the model (its depth), before any work."""
        self.check_depth(model.cfg.n_layers)

    def check_shape(self, shape) -> None:
        """:meth:`check_depth` from the model's shape, before its weights load."""
        self.check_depth(shape.n_layers)

    def check_depth(self, n: int) -> None:
        """The checks against a model of ``n`` blocks (states ``0..n``): :meth:`check` and ``tlgeo plan``."""
        if self.layers is not None and max(self.layers) > n:
            raise InputError(f"layers {[l for l in self.layers if l > n]} out of range: the states are 0..{n}")
        for name in ("single_pass_layer", "edit_layer"):
            v = getattr(self, name)
            if v is not None and v > n:
                raise InputError(f"{name} {v} out of range: states 1..{n} can be edited")


def _take(ps: PromptSet, per_group: int | None) -> PromptSet:
    return ps if per_group is None else ps.take(per_group)
