"""The parameters of the patching analysis: one frozen config, checked once.

``tlgeo patching``'s flags, the atlas's ``--patching-*`` budgets and the notebook's keyword
arguments are all this class's fields."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

from ..errors import InputError
from ..runner.analysis import Config, param
from .components import COMPONENTS, FRAMES
from .runs import DIRECTIONS
from .tasks import TASKS, Task
from .tasks.custom import TASK_FILE, load_task, save_task

__all__ = ["PatchingConfig", "METHODS", "parse_heads"]

METHODS = ("exact", "attribution", "paths")
INPUTS = ("q", "k", "v")
_HEAD = re.compile(r"^L?(\d+)(?:[H.](\d+))?$")


def _head_spec(spec, field: str, allow_logits: bool) -> tuple[int, int | None] | None:
    """``(layer, head)`` of ``L23H3`` / ``23.3``, ``(layer, None)`` of ``L23`` / ``23``, ``None`` for ``logits``."""
    spec = str(spec).strip()
    if allow_logits and spec == "logits":
        return None
    m = _HEAD.match(spec)
    if not m:
        what = "a head (L23H3 or 23.3), a block (L23)" + (" or logits" if allow_logits else "")
        raise InputError(f"{field}: {spec!r} is not {what}")
    return int(m.group(1)), None if m.group(2) is None else int(m.group(2))


def parse_heads(specs, n_layers: int, n_heads: int, *, field: str, allow_logits: bool = False):
    """``(heads, logits)``: the ``(layer, head)`` pairs of ``specs`` (``L23H3`` or ``23.3`` one head, ``L23`` or
    ``23`` every head of block 23) and whether ``logits`` is among them; a spec out of range raises naming it."""
    heads, logits = [], False
    for spec in specs:
        got = _head_spec(spec, field, allow_logits)
        if got is None:
            logits = True
            continue
        layer, head = got
        if layer >= n_layers:
            raise InputError(f"{field}: block {layer} out of range: the model has {n_layers} (0..{n_layers - 1})")
        if head is not None and head >= n_heads:
            raise InputError(f"{field}: head {head} out of range: the model has {n_heads} heads (0..{n_heads - 1})")
        heads += [(layer, head)] if head is not None else [(layer, h) for h in range(n_heads)]
    return list(dict.fromkeys(heads)), logits


@dataclass(frozen=True)
class PatchingConfig(Config):
    """Build each task's clean and corrupted prompts (or take your own :class:`~.tasks.Task`), check that the
    model does the task, and patch
    every component of every head and MLP from one run into the other: exactly (one resumed forward
    per component and block, all heads at once) and by attribution (one forward and backward)."""

    tasks: tuple[str | Task, ...] = param(
        ("ioi",),
        "tasks (in Python also your own Task objects, e.g. from "
        "task_from_texts; a task file patching_task_NAME.json, which a "
        "Python run writes beside its tables)",
        choices=tuple(TASKS),
        accepts=Task,
        item=str,
    )
    prompts: int = param(
        32,
        "prompts per task",
        atlas=8,
        cost="linear; exact: per component and block a forward "
        "from that block on (x n_heads for a head component); "
        "attribution: a forward and backward",
    )
    seed: int = param(0, "seed of the prompts (names, years, tokens drawn)", min=0)
    components: tuple[str, ...] = param(
        tuple(COMPONENTS),
        "components patched",
        choices=tuple(COMPONENTS),
        atlas=("head", "head_par", "head_perp", "mlp"),
    )
    methods: tuple[str, ...] = param(
        ("exact", "attribution"),
        "exact patching, attribution patching (first order), path patching (--path-senders into --path-receivers)",
        choices=METHODS,
    )
    exact_components: tuple[str, ...] | None = param(
        None,
        "components patched exactly (default: --components; attribution always covers them all)",
        choices=tuple(COMPONENTS),
        atlas=("head",),
    )
    directions: tuple[str, ...] = param(
        ("denoise",),
        "denoise: clean activations into the corrupted run (what a "
        "component restores); noise: corrupted into the clean run "
        "(what it destroys)",
        choices=DIRECTIONS,
    )
    positions: str = param(
        "all", "patched positions: all, or a named position of the task (end; IOI: IO, S1, S2; greater_than: YY)"
    )
    frame: str = param(
        "patched",
        "whose reference splits a part copied across runs: the patched run's (its write's "
        "component along the state it updates takes the source's value) or the source's",
        choices=FRAMES,
    )
    layers: tuple[int, ...] | None = param(None, "blocks patched (default: all)", indices=True)
    path_senders: tuple[str, ...] = param(
        (),
        "path patching's senders: heads L23H3 (or 23.3) or blocks L23 (every head); an MLP component's block from L23",
        item=str,
        group="path patching",
    )
    path_receivers: tuple[str, ...] = param(
        (), "path patching's receivers: heads or blocks after a sender, and/or logits", item=str, group="path patching"
    )
    path_inputs: tuple[str, ...] = param(INPUTS, "the receivers' inputs patched", choices=INPUTS, group="path patching")
    path_components: tuple[str, ...] = param(
        ("head",),
        "the senders' components (their parts: head_par, nonself, ...)",
        choices=tuple(COMPONENTS),
        group="path patching",
    )
    through_mlps: bool = param(
        True,
        "a sender's change reaches the receiver through the MLPs between (Wang et al.); off: the direct path only",
        group="path patching",
    )
    min_accuracy: float = param(
        0.7, "a task the model answers right on fewer of its clean prompts is reported, not patched"
    )
    max_rows: int = param(256, "rows per patched forward (heads x prompts)")
    batch_size: int = param(32, "prompts per forward of the clean, corrupted and attribution runs")

    def __post_init__(self) -> None:
        tasks = self.tasks if isinstance(self.tasks, (tuple, list)) else (self.tasks,)
        object.__setattr__(
            self, "tasks", tuple(load_task(t) if isinstance(t, str) and t.endswith(".json") else t for t in tasks)
        )  # your own task from a file (a command line)
        super().__post_init__()

    def for_command(self, out) -> "PatchingConfig":
        """This config as a command line can say it: each of your own tasks written to ``out`` as
        :data:`~.tasks.custom.TASK_FILE` and named by that file (``--tasks induction,OUT/patching_task_x.json``)."""
        from pathlib import Path

        if out is None or all(isinstance(t, str) for t in self.tasks):
            return self
        files = [
            t
            if isinstance(t, str)
            else save_task(t, Path(out) / TASK_FILE.format(name=re.sub(r"[^\w.-]", "_", t.name)))
            for t in self.tasks
        ]
        said = copy.copy(self)  # the files' names, not the tasks read back from them
        object.__setattr__(said, "tasks", tuple(files))
        return said

    def validate(self) -> None:
        self._check_choices()
        if not 0 <= self.min_accuracy <= 1:
            raise InputError(f"min_accuracy must be in [0, 1], got {self.min_accuracy}")
        if self.prompts < 2:
            raise InputError(f"prompts must be >= 2 (a CI over prompts), got {self.prompts}")
        names = self.task_names()
        if len(set(names)) < len(names):
            raise InputError(f"tasks: two tasks named alike in {list(names)}; give each task its own name")
        clash = [t.name for t in self.tasks if isinstance(t, Task) and t.name in TASKS]
        if clash:
            raise InputError(f"tasks: your task is named {clash[0]!r}, as a built-in task; give it another name")
        for field, specs, logits in (
            ("path_senders", self.path_senders, False),
            ("path_receivers", self.path_receivers, True),
        ):
            for spec in specs:  # the form, before the model loads (the range needs the model)
                _head_spec(spec, field, logits)
        if "paths" in self.methods and not (self.path_senders and self.path_receivers):
            raise InputError(
                "methods: paths needs path_senders and path_receivers (--path-senders L0H2 --path-receivers L1,logits)"
            )
        if not self.positions or not self.positions.replace("_", "").isalnum():
            raise InputError(f"positions must be 'all' or a position name, got {self.positions!r}")

    def check_shape(self, shape) -> None:
        """``layers``, ``path_senders`` and ``path_receivers`` inside the model (``shape``: its blocks and heads,
        from its config), before its weights load."""
        from ..errors import OutOfRangeError, spans

        bad = [l for l in (self.layers or ()) if not 0 <= l < shape.n_layers]
        if bad:
            raise OutOfRangeError(
                f"layers: layer(s) {spans(bad)} out of range: the model has {shape.n_layers} "
                f"layers (0..{shape.n_layers - 1})"
            )
        parse_heads(self.path_senders, shape.n_layers, shape.n_heads, field="path_senders")
        parse_heads(self.path_receivers, shape.n_layers, shape.n_heads, field="path_receivers", allow_logits=True)

    def task_names(self) -> tuple[str, ...]:
        """The tasks' names (a :class:`~.tasks.Task` object's own)."""
        return tuple(t if isinstance(t, str) else t.name for t in self.tasks)

    def exact_set(self) -> tuple[str, ...]:
        """The components patched exactly."""
        return self.components if self.exact_components is None else self.exact_components
