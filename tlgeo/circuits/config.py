"""The parameters of circuit discovery: one frozen config, checked once (``tlgeo circuit``'s flags, the notebook's
keyword arguments)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..patching.tasks import TASKS
from ..runner.analysis import Config, param

__all__ = ["CircuitConfig", "METHODS"]

METHODS = ("eap", "eap-ig", "exact")


@dataclass(frozen=True)
class CircuitConfig(Config):
    """Score every edge of the model's graph (input, heads' q / k / v inputs, MLPs, logits) on a task's clean and
    corrupted prompts, keep the top-k edges, and measure how much of the behaviour they carry with every other edge
    reading the corrupted run."""

    tasks: tuple[str, ...] = param(
        ("ioi",),
        "the tasks (their clean and corrupted prompts and metric), one circuit each",
        choices=tuple(TASKS),
        item=str,
        flag="--task",
        dest="tasks",
    )
    prompts: int = param(
        8,
        "prompts of the task",
        cost="linear: per prompt batch a corrupted forward, EAP one "
        "forward and backward (EAP-IG: ig-steps of them), every "
        "faithfulness point and verified edge a forward",
    )
    seed: int = param(0, "seed of the prompts", min=0)
    method: str = param(
        "eap-ig",
        "edge scores: eap (one clean forward and backward), eap-ig (integrated gradients "
        "over --ig-steps interpolated input embeddings) or exact (each edge patched alone: "
        "one forward per edge, small models)",
        choices=METHODS,
    )
    ig_steps: int = param(5, "EAP-IG's interpolation steps from the corrupted to the clean input embedding")
    k: tuple[int, ...] | None = param(
        None,
        "circuit sizes (edges kept) of the faithfulness curve (default: 0, every "
        "edge, MIB's shares 0.1 to 50 percent of the edges and 1, 2, 3, 5, 8, "
        "13, 20, 30, 50, 100, ...)",
        item=int,
        min=0,
    )
    levels: tuple[float, ...] = param(
        (0.8, 0.9), "faithfulness levels whose smallest k is found (bisection between the curve's points)", item=float
    )
    k_tolerance: float = param(
        0.0,
        "the bisection for a level's smallest k stops once its bracket is within this share of its upper end "
        "(0: the exact smallest k; 0.1: k80 and k90 overstated by less than 10 percent, in fewer forwards)",
        min=0.0,
    )
    verify: int = param(20, "top edges whose scores are checked by exact edge patching (0: none)", min=0)
    batch_size: int = param(8, "prompts per forward")
    max_rows: int = param(64, "rows per patched forward (circuits or verified edges x prompts)")

    def validate(self) -> None:
        self._check_choices()
        if not self.tasks or len(set(self.tasks)) < len(self.tasks):
            raise InputError(f"tasks: give one or more different tasks, got {list(self.tasks)}")
        if self.prompts < 2:
            raise InputError(f"prompts must be >= 2, got {self.prompts}")
        if self.ig_steps < 1:
            raise InputError(f"ig_steps must be >= 1, got {self.ig_steps}")
        if not 0 <= self.k_tolerance < 1:
            raise InputError(f"k_tolerance must be in [0, 1), got {self.k_tolerance}")
        bad = [v for v in self.levels if not 0 < v <= 1]
        if bad:
            raise InputError(f"levels must be in (0, 1], got {bad[0]}")
        if self.k is not None and any(k < 0 for k in self.k):
            raise InputError(f"k must be >= 0, got {min(self.k)}")

    @property
    def steps(self) -> int:
        """The interpolation steps the scores used (0 unless the method is EAP-IG)."""
        return self.ig_steps if self.method == "eap-ig" else 0
