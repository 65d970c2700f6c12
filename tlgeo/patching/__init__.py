"""Geometry-resolved activation patching: which heads' parallel, perpendicular, self and non-self writes
carry a behaviour, exactly and by attribution.

* :mod:`.tasks`: clean/corrupted prompt sets with a metric (IOI, subject-verb agreement, greater-than,
  induction); a :class:`~.tasks.Task` is a small dataclass, so a notebook cell can add its own
  (:func:`~.tasks.task_from_texts`) and patch it: ``run(model, PatchingConfig(tasks=(my_task,)))``.
* :mod:`.components`: what is patched (a head's whole output, its write along / orthogonal to the
  residual, its self message and non-self aggregate, the MLP's output and parts), one registry.
* :mod:`.runs`: the clean and corrupted runs, cached; :mod:`.exact`: hooks and the batched, resumed
  sweep; :mod:`.attribution`: the first-order estimate from one forward and backward;
  :mod:`.effects`: normalised effects, bootstrap CIs, p- and Benjamini–Hochberg q-values, attribution vs
  exact; :mod:`.baseline`: the share of a head's write along the residual against a randomly rotated
  write's (the control of a ``head_par`` effect).
* The contract files: :mod:`.config`, :mod:`.analysis`, :mod:`.plots`, :mod:`.atlas`, :mod:`.cli`.
"""

from .components import COMPONENTS, Component, get_component
from .exact import exact_sweep, patch_hooks
from .attribution import attribution_sweep
from .runs import task_runs
from .paths import path_effects, path_runs, path_sweep
from .tasks import TASKS, Task, TaskError, build_task, clean_accuracy, task_from_texts
from .config import PatchingConfig
from .analysis import PatchingResult, run

__all__ = [
    "COMPONENTS",
    "Component",
    "get_component",
    "patch_hooks",
    "exact_sweep",
    "attribution_sweep",
    "task_runs",
    "path_runs",
    "path_sweep",
    "path_effects",
    "TASKS",
    "Task",
    "TaskError",
    "build_task",
    "clean_accuracy",
    "task_from_texts",
    "PatchingConfig",
    "PatchingResult",
    "run",
]
