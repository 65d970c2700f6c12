"""Geometry-resolved activation patching of one model, on the analysis contract:
``run(model, PatchingConfig(...)) -> PatchingResult``.

For each task: build its prompts (:mod:`.tasks`), check that the model does it (a task it
cannot do is reported in ``tasks``, not patched), cache its clean and corrupted runs, then
patch. Work units: ``("attribution", task, direction)`` (every component at once) and
``("exact", task, direction, component, layer)`` (every head of one block). Each patched
(component, layer, head) is one line of the log ``<log>/patching.jsonl`` with its per-prompt
metric, written as soon as it is computed, so an interrupted run resumes; effects, their
bootstrap CIs and p-values are computed from the log. The Benjamini–Hochberg q-values need the
whole family of an effect (every component, layer and head of one task, method and direction), so
the result computes them when it is made (a run, a merge of work units, a load) and again on the
saved table after a save merges rows into it.

Where a component splits heads' residual writes, each task's clean run also gives ``par_baseline``
(:mod:`.baseline`): per block and head, the share of the write along the residual against that of a
randomly rotated write, the control of a ``head_par`` effect near 0. A unit yields the rows of the
blocks it patches.
"""

from __future__ import annotations

import warnings

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from ..errors import InputError
from ..families import Family, Support
from ..runner.analysis import Analysis, Result, Table, register_analysis
from ..hooks.adapter import resolve_layers
from ..models import Model, model_label
from ..runner.identity import identified, run_identity
from ..runner.results import IDENTITY, ResultLog, content_digest, drop_rows, note, read_table, row_ids
from .attribution import attribution_sweep
from .baseline import COLUMNS as BASELINE_COLUMNS
from .baseline import par_baseline_rows
from .components import get_component
from .config import PatchingConfig, parse_heads
from .effects import add_qvalues, agreement, effect_test, interactions
from .exact import exact_sweep, heads_per_forward
from .paths import path_hook_names, path_sweep
from .plots import head_attention_rows, top_heads
from .runs import TaskRuns, check_separable_heads, task_runs
from .tasks import Task, TaskError, build_task, own_task

__all__ = ["PatchingResult", "run", "units", "unit_cost", "task_digest", "LOG_KEY"]

SETTINGS = ("task", "prompts", "seed", "method", "direction", "positions", "frame")
LOG_KEY = ("model", *SETTINGS, "component", "layer", "head", "inputs")  # inputs: the task's digest (task_digest)
EFFECT_COLUMNS = (*LOG_KEY[:-1], "effect", "ci_low", "ci_high", "n", "se", "p", "q", "significant")
BASELINE_KEY = ("model", "task", "prompts", "seed", "layer", "head")
PATH_CELL = (
    "through_mlps",
    "component",
    "sender_layer",
    "sender_head",
    "receiver_layer",
    "receiver_head",
    "receiver_input",
)
PATH_LOG_KEY = ("model", *SETTINGS, *PATH_CELL, "inputs")


@dataclass
class PatchingResult(Result):
    """``tasks``: per task, whether the model does it (clean accuracy, metrics) and was patched;
    ``effects``: per (task, method, direction, component, layer, head) the normalised effect
    (:mod:`.effects`) with its Fieller interval over prompts (``head`` -1 for MLP components), the delta-method
    standard error ``se``, the two-sided p-value ``p`` of ``effect != 0`` (:func:`.effects.effect_test`; the
    interval excludes 0 exactly when ``p < 0.05``), its Benjamini–Hochberg ``q`` within the family,
    ``family_size`` (the tests in it) and ``significant`` (``q < 0.05``;
    :func:`.effects.add_qvalues`); ``par_baseline``: per (task, layer, head) the energy share of the
    head's write along the residual on the clean run, of a randomly rotated write, and ``1 / d_model``
    (:mod:`.baseline`; no rows where the heads' writes are not their own: the task's ``note`` says why);
    ``agreement`` (attribution against exact patching) and ``interactions`` (a split's parts against the
    whole), made from ``effects``; ``paths`` (``--methods paths``): per (component, sender, receiver head, input)
    the effect of the sender's change let through only to that input (:mod:`.paths`; ``receiver_input`` ``logits``
    with ``receiver_head`` -1 for the direct path to the logits; ``kv_head``: the key/value head a k or v
    receiver shares under grouped-query attention), with CI, ``p`` and ``q`` over every path of its family.

    ``q`` and ``significant`` are recomputed from ``p`` whenever the result is made (so a merge of work
    units equals the whole run) and over the whole saved table when it is merged (:attr:`Table.whole`)."""

    TABLES = (
        Table("tasks", ("model", "task", "prompts", "seed"), "patching_tasks.csv"),
        Table("effects", ("model", *SETTINGS, "component", "layer", "head"), "patching_effects.csv", whole=add_qvalues),
        Table("par_baseline", BASELINE_KEY, "patching_par_baseline.csv"),
        Table("attention", ("model", "task", "prompts", "seed", "view", "query", "key"), "patching_attention.csv.gz"),
        Table("paths", ("model", *SETTINGS, *PATH_CELL), "patching_paths.csv", whole=add_qvalues),
        Table(
            "agreement",
            ("model", *SETTINGS[:3], *SETTINGS[4:], "component"),
            "patching_agreement.csv",
            derive=lambda r: _summary(agreement, r.effects),
        ),
        Table(
            "interactions",
            ("model", *SETTINGS[:3], *SETTINGS[4:], "split", "layer", "head"),
            "patching_interactions.csv",
            derive=lambda r: _summary(interactions, r.effects),
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.effects is not None:
            self.effects = add_qvalues(self.effects)
        if self.paths is not None:
            self.paths = add_qvalues(self.paths)

    def drop_stale(self, out: Path) -> None:
        """The rows of ``out`` that this run makes stale go first (:func:`_drop_stale`)."""
        _drop_stale(out, self)


TASK_KEY = (*IDENTITY, "task", "prompts", "seed")  # what a task's rows in every table are of


def _drop_stale(out: Path, result: PatchingResult) -> None:
    """Before ``result`` is merged into ``out``: remove from every table of ``out`` the rows of a task that this run
    found not patched, or patched on other inputs (another ``inputs`` digest in the saved tasks table): rows the
    run does not write again would otherwise stay beside "not patched" or the new prompts. Says how many went."""
    tasks = result.tasks
    if tasks is None or tasks.empty or any(k not in tasks.columns for k in TASK_KEY):
        return
    new_ids = row_ids(tasks, TASK_KEY)
    unpatched = set(new_ids[~tasks["patched"].astype(bool)])
    stale = set(unpatched)
    saved = out / result.table("tasks").filename
    if saved.exists() and "inputs" in tasks.columns:
        old = read_table(saved, as_text=True)
        if not old.empty and all(k in old.columns for k in TASK_KEY):
            before = dict(zip(row_ids(old, TASK_KEY), old["inputs"] if "inputs" in old.columns else [""] * len(old)))
            stale |= {
                i for i, d in zip(new_ids, tasks["inputs"].astype(str)) if i in before and before[i] != d and d != "nan"
            }
    if not stale:
        return
    for t in result.TABLES:
        if t.name == "tasks":
            continue
        gone = drop_rows(out / t.filename, TASK_KEY, stale)
        df = getattr(result, t.name)
        if df is not None and not gone.empty and all(k in df.columns for k in t.row_key):
            gone = gone[~row_ids(gone, t.row_key).isin(set(row_ids(df, t.row_key)))]  # written again below
        if len(gone):
            ids = set(row_ids(gone, TASK_KEY))
            why = " / ".join(
                w
                for w, some in (
                    ("not patched by this run", ids & unpatched),
                    ("patched on other inputs now", ids - unpatched),
                )
                if some
            )
            note(
                f"removed {len(gone)} row{'s' if len(gone) != 1 else ''} of {out / t.filename}, left by an earlier "
                f"run of task(s) {', '.join(sorted(set(gone['task'])))}: {why}"
            )


def _summary(fn, effects: pd.DataFrame | None) -> pd.DataFrame | None:
    """``fn(effects)`` (attribution vs exact, or the interactions of split parts); ``None`` when it has no row."""
    if effects is None or effects.empty:
        return None
    got = fn(effects)
    return got if len(got) else None


def _layers(model: Model, cfg: PatchingConfig) -> list[int]:
    return resolve_layers(model.cfg, None if cfg.layers is None else list(cfg.layers))


def units(model: Model, cfg: PatchingConfig) -> list[tuple]:
    """Per task and direction: ``("attribution", task, direction)``, then ``("exact", task, direction,
    component, layer)`` for every exactly patched component and block, then ``("paths", task, direction,
    component, sender_layer)`` for every path-patched component and sender block."""
    out: list[tuple] = []
    for task in cfg.task_names():
        for d in cfg.directions:
            if "attribution" in cfg.methods:
                out.append(("attribution", task, d))
            if "exact" in cfg.methods:
                out += [("exact", task, d, c, l) for c in cfg.exact_set() for l in _layers(model, cfg)]
            if "paths" in cfg.methods:
                out += [("paths", task, d, c, l) for c in cfg.path_components for l in _sender_layers(model, cfg)]
    return out


def _senders(model: Model, cfg: PatchingConfig) -> list[tuple[int, int]]:
    return parse_heads(cfg.path_senders, model.cfg.n_layers, model.cfg.n_heads, field="path_senders")[0]


def _receivers(model: Model, cfg: PatchingConfig) -> tuple[list[tuple[int, int]], bool]:
    return parse_heads(
        cfg.path_receivers, model.cfg.n_layers, model.cfg.n_heads, field="path_receivers", allow_logits=True
    )


def _sender_layers(model: Model, cfg: PatchingConfig) -> list[int]:
    return sorted({l for l, _ in _senders(model, cfg)})


def unit_cost(model: Model, cfg: PatchingConfig, unit: Sequence) -> float:
    """A unit's run time in forwards over the prompts: an exact unit runs its blocks from ``layer`` on,
    once per head for head components; attribution is about three forwards."""
    if unit[0] == "attribution":
        return 3.0
    n = model.cfg.n_layers
    if unit[0] == "paths":  # one sender pass per head, then per receiver block and input one pass per receiver
        senders = sum(1 for l, _ in _senders(model, cfg) if l == unit[4])
        receivers, logits = _receivers(model, cfg)
        later = [l for l, _ in receivers if l > unit[4]]
        return senders * ((n - unit[4]) / n + len(cfg.path_inputs) * sum((n - l) / n for l in later)) + logits
    reps = model.cfg.n_heads if get_component(unit[3]).scope == "head" else 1
    return reps * (n - unit[4]) / n


def task_prompts(cfg: PatchingConfig, name: str) -> int:
    """The ``prompts`` a task's rows are keyed by: ``cfg.prompts`` for a built-in task, your task's own count."""
    own = {t.name: t.n for t in cfg.tasks if isinstance(t, Task)}
    return own.get(name, cfg.prompts)


def _task_row(label: str, cfg: PatchingConfig, name: str, **cols: Any) -> dict:
    return dict(model=label, task=name, prompts=task_prompts(cfg, name), seed=cfg.seed, **cols)


class _Rows:
    """The rows of a run's tables as its tasks add them (``baseline`` None: no head_par control)."""

    def __init__(self, baseline: list[dict] | None) -> None:
        self.tasks: list[dict] = []
        self.effects: list[dict] = []
        self.paths: list[dict] = []
        self.baseline = baseline
        self.attention: list[pd.DataFrame] = []


def _logs(model: Model, log_dir: Path | None, chosen: list[tuple]) -> tuple[ResultLog | None, ResultLog | None]:
    """The per-prompt logs of the patched units and of the paths (None without a log folder or without paths)."""
    rlog = (
        ResultLog(log_dir / "patching.jsonl", LOG_KEY, identity=run_identity(model).row(), content=("inputs",))
        if log_dir is not None
        else None
    )
    plog = (
        ResultLog(
            log_dir / "patching_paths.jsonl", PATH_LOG_KEY, identity=run_identity(model).row(), content=("inputs",)
        )
        if log_dir is not None and any(u[0] == "paths" for u in chosen)
        else None
    )
    return rlog, plog


def _build_tasks(model: Model, cfg: PatchingConfig, chosen: list[tuple], progress: bool) -> dict[str, Task | TaskError]:
    """Every task of ``chosen`` built and checked before any forward (a task that cannot be built: its error)."""
    built: dict[str, Task | TaskError] = {}
    own = {t.name: t for t in cfg.tasks if isinstance(t, Task)}
    for name in dict.fromkeys(u[1] for u in chosen):
        try:
            built[name] = (
                own_task(own[name], model) if name in own else build_task(name, model, n=cfg.prompts, seed=cfg.seed)
            )
        except TaskError as e:
            built[name] = e
            if not progress:
                warnings.warn(f"patching: task {name!r} not patched: {e}", stacklevel=4)
            continue
        if cfg.positions != "all" and cfg.positions not in built[name].positions:
            raise InputError(
                f"positions: task {name!r} has no position {cfg.positions!r}; "
                f"choose from {['all', *built[name].positions]}"
            )
    return built


def _task_comps(cfg: PatchingConfig, mine: list[tuple], baseline: bool) -> list[str]:
    """The components a task's runs read: attribution's, the exact units', head_par for the control."""
    return list(
        dict.fromkeys(
            [
                *(cfg.components if any(u[0] == "attribution" for u in mine) else ()),
                *(u[3] for u in mine if u[0] == "exact"),
                *(("head_par",) if baseline else ()),
            ]
        )
    )


def _task_status(
    cfg: PatchingConfig, task: Task, name: str, runs: TaskRuns, label: str, progress: bool
) -> tuple[dict, str]:
    """A task's row of the tasks table and why it is not patched ("" when it is), said or warned."""
    acc = runs.accuracy()
    gap = acc["clean_metric"] - acc["corrupted_metric"]
    reason = ""
    if acc["accuracy"] < cfg.min_accuracy:
        reason = (
            f"clean accuracy {acc['accuracy']:.2f} < min_accuracy {cfg.min_accuracy}: the model does not do the task"
        )
    elif not gap > 0:
        reason = f"the corrupted prompts score as high as the clean ones (gap {gap:.3g}): nothing to restore"
    row = _task_row(
        label,
        cfg,
        name,
        **{**acc, "n": task.n},
        gap=gap,
        patched=not reason,
        reason=reason,
        note="",
        inputs=task_digest(task),
    )
    if progress:
        print(
            f"  {name}: {task.n} prompts, clean accuracy {acc['accuracy']:.2f}, metric clean "
            f"{acc['clean_metric']:.3f} / corrupted {acc['corrupted_metric']:.3f}"
            + (f" -- not patched: {reason}" if reason else ""),
            flush=True,
        )
    elif reason:  # in a notebook: said, not only a row of the tasks table
        warnings.warn(f"patching: task {name!r} not patched: {reason}", stacklevel=5)
    return row, reason


def _run_task(
    model: Model,
    cfg: PatchingConfig,
    task: Task,
    name: str,
    mine: list[tuple],
    rows: _Rows,
    *,
    label: str,
    logs: tuple[ResultLog | None, ResultLog | None],
    progress: bool,
) -> None:
    """One built task's units: its runs and row of the tasks table, then, when it is patched, its sweeps."""
    comps = _task_comps(cfg, mine, rows.baseline is not None)  # its reads
    path_units = [u for u in mine if u[0] == "paths"]
    runs = task_runs(
        model,
        task,
        comps,
        _layers(model, cfg),
        batch_size=cfg.batch_size,  # one pass per run,
        extra=_path_hooks(model, cfg, path_units),
    )  # what the paths read too
    row, reason = _task_status(cfg, task, name, runs, label, progress)
    rows.tasks.append(row)
    if reason:
        return
    refused = _refused(model, runs, comps, _layers(model, cfg))
    if refused:
        row["note"] = refused
        if progress:
            print(f"  {name}: {refused}", flush=True)
    if rows.baseline is not None and not refused:
        blocks = sorted(
            {l for u in mine if u[0] != "paths" for l in (_layers(model, cfg) if u[0] == "attribution" else [u[4]])}
        )
        rows.baseline += [
            _task_row(label, cfg, name, **r) for r in par_baseline_rows(model, runs, blocks, seed=cfg.seed)
        ]
    _sweep_task(model, cfg, task, name, runs, mine, rows, label=label, logs=logs, progress=progress, refused=refused)


def _sweep_task(
    model: Model,
    cfg: PatchingConfig,
    task: Task,
    name: str,
    runs: TaskRuns,
    mine: list[tuple],
    rows: _Rows,
    *,
    label: str,
    logs: tuple[ResultLog | None, ResultLog | None],
    progress: bool,
    refused: str,
) -> None:
    """A patched task's sweeps and paths, then the attention of its largest heads (for the report)."""
    rlog, plog = logs
    if progress:  # one bar per task: a sweep of every component at every block is many units
        from tqdm.auto import tqdm

        mine = tqdm(mine, desc=f"patching {name}", unit="sweep")
    heads = []
    for u in mine:
        if u[0] == "paths":
            rows.paths += [_path_effect_row(r, runs, cfg) for r in _paths(model, cfg, runs, label, u, plog)]
            continue
        got = [_effect_row(r, runs, cfg) for r in _patch(model, cfg, runs, label, u, rlog, skip_write=bool(refused))]
        rows.effects += got
        heads += _viewed_heads(pd.DataFrame(got))
    heads = list(dict.fromkeys(heads))
    if heads:  # the report's attention view, kept here so that it draws without the model
        rows.attention.append(head_attention_rows(model, task.clean[:1], heads).assign(**_task_row(label, cfg, name)))


@identified
def run(
    model: Model,
    cfg: PatchingConfig,
    *,
    out: str | Path | None = None,
    log: str | Path | None = None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: Any = None,
) -> PatchingResult:
    """Every unit of ``cfg`` (or ``units``); with ``out`` the tables are merged into ``out`` and the log
    kept in ``log`` (default ``out``). ``on_table(name, df)`` is called with each finished table."""
    chosen = globals()["units"](model, cfg) if units is None else [tuple(u) for u in units]
    log_dir = Path(log) if log is not None else (Path(out) if out is not None else None)
    logs = _logs(model, log_dir, chosen)
    label = model_label(model)
    patched = any(u[0] != "paths" for u in chosen)  # exact or attribution units (effects, their baseline)
    rows = _Rows([] if _wants_baseline(cfg) and patched else None)
    for name, task in _build_tasks(model, cfg, chosen, progress).items():
        if isinstance(task, TaskError):
            rows.tasks.append(_task_row(label, cfg, name, patched=False, reason=str(task)))
            continue
        mine = [u for u in chosen if u[1] == name]
        _run_task(model, cfg, task, name, mine, rows, label=label, logs=logs, progress=progress)
    tasks_df = pd.DataFrame(rows.tasks)
    effects_df = pd.DataFrame(rows.effects, columns=list(EFFECT_COLUMNS[:-2])) if patched else None
    baseline_df = (
        None if rows.baseline is None else pd.DataFrame(rows.baseline, columns=[*BASELINE_KEY, *BASELINE_COLUMNS[2:]])
    )
    attention_df = pd.concat(rows.attention, ignore_index=True) if rows.attention else None
    paths_df = pd.DataFrame(rows.paths) if rows.paths else None  # a rank or task without paths adds no empty table
    return PatchingResult(
        tasks=tasks_df, effects=effects_df, par_baseline=baseline_df, attention=attention_df, paths=paths_df
    ).deliver(out, on_table, identity=run_identity(model).row())


VIEWED_HEADS = 4  # the attention view's heads per method and direction


def _viewed_heads(effects: pd.DataFrame) -> list[tuple[int, int]]:
    """The heads whose clean attention a report may show for one task, from the effects of one work unit:
    the :data:`VIEWED_HEADS` largest ``|effect|`` of the whole head, per method and direction. Taken unit by
    unit, so that a run split into units stores what the whole run stores; the largest of a task's effects
    are among the largest of some unit's, so the stored rows hold every head a report picks."""
    if effects.empty:
        return []
    whole = effects[(effects["component"] == "head") & (effects["head"] >= 0)]
    heads: list[tuple[int, int]] = []
    for (method, direction), _ in whole.groupby(["method", "direction"], sort=False):
        top = top_heads(whole, str(whole["task"].iloc[0]), method=method, direction=direction, k=VIEWED_HEADS)
        heads += [(int(l), int(h)) for l, h in zip(top["layer"], top["head"])]
    return list(dict.fromkeys(heads))


def _wants_baseline(cfg: PatchingConfig) -> bool:
    """Whether a component of ``cfg`` splits heads' residual writes (then the par baseline is its control)."""
    return any(get_component(c).quantity == "write" for c in (*cfg.components, *cfg.exact_set()))


def _refused(model: Model, runs: TaskRuns, comps: list[str], layers: list[int]) -> str:
    """Why ``head_par`` / ``head_perp`` cannot be patched on this model ("" when they can or are not asked for)."""
    if not any(get_component(c).quantity == "write" for c in comps):
        return ""
    try:
        check_separable_heads(model, runs, layers)
    except ValueError as e:
        return f"head_par and head_perp not patched: {e}"
    return ""


def task_digest(task: Task) -> str:
    """What a task's rows measure (:func:`tlgeo.runner.results.content_digest`): its token ids, answers, metric and
    named positions. A task run again under its name with other prompts has another digest, so its rows
    are computed again rather than read back from the log."""
    return content_digest(task.clean, task.corrupted, task.correct, task.wrong, task.metric, dict(task.positions))


def _patch(
    model: Model,
    cfg: PatchingConfig,
    runs: TaskRuns,
    label: str,
    unit: tuple,
    rlog: ResultLog | None,
    skip_write: bool = False,
) -> list[dict]:
    """The log rows of one unit: read back where a previous run finished them with the same task content,
    else computed and logged (``skip_write``: leave out the components of a head's residual write)."""
    method, name, direction = unit[:3]
    base = dict(
        model=label,
        task=name,
        prompts=task_prompts(cfg, name),
        seed=cfg.seed,
        method=method,
        direction=direction,
        positions=cfg.positions,
        frame=cfg.frame,
        inputs=task_digest(runs.task),
    )
    layers = _layers(model, cfg) if method == "attribution" else [unit[4]]
    comps = list(cfg.components) if method == "attribution" else [unit[3]]
    comps = [c for c in comps if not (skip_write and get_component(c).quantity == "write")]
    if not comps:
        return []
    expected = [
        (c, l, h)
        for c in comps
        for l in layers
        for h in (range(model.cfg.n_heads) if get_component(c).scope == "head" else [-1])
    ]
    if rlog is not None:
        got = [rlog.get(**base, component=c, layer=l, head=h) for c, l, h in expected]
        if all(g is not None for g in got):
            return got
    kw = dict(layers=layers, direction=direction, positions=cfg.positions, frame=cfg.frame)
    if method == "attribution":
        rows = attribution_sweep(model, runs, comps, batch_size=cfg.batch_size, **kw)
    else:
        rows = exact_sweep(model, runs, comps, max_rows=cfg.max_rows, **kw)
    by_cell = {(r["component"], r["layer"], r["head"]): {**base, **r} for r in rows}
    rows = [by_cell[k] for k in expected]  # the order of a run read back from the log
    if rlog is not None:
        rlog.extend(r for r in rows if not rlog.done(**{k: r[k] for k in LOG_KEY}))
    return rows


def _path_hooks(model: Model, cfg: PatchingConfig, units: list[tuple]) -> list[str]:
    """What the task's path units read from its runs (none without path units)."""
    if not units:
        return []
    receivers, logits = _receivers(model, cfg)
    return path_hook_names(
        model,
        list(dict.fromkeys(u[3] for u in units)),
        [u[4] for u in units],
        [l for l, _ in receivers],
        cfg.through_mlps,
        logits,
    )


def _paths(
    model: Model, cfg: PatchingConfig, runs: TaskRuns, label: str, unit: tuple, plog: ResultLog | None
) -> list[dict]:
    """The log rows of one path unit (a component's senders in one block into every receiver after them): read
    back where a previous run finished them with the same task content, else computed and logged."""
    _, name, direction, comp, layer = unit
    base = dict(
        model=label,
        task=name,
        prompts=task_prompts(cfg, name),
        seed=cfg.seed,
        method="paths",
        direction=direction,
        positions=cfg.positions,
        frame=cfg.frame,
        through_mlps=cfg.through_mlps,
        inputs=task_digest(runs.task),
    )
    senders = [(l, h) for l, h in _senders(model, cfg) if l == layer]
    if get_component(comp).scope == "layer":
        senders = [(layer, -1)]
    receivers, logits = _receivers(model, cfg)
    expected = [(s, (rl, rh), i) for s in senders for rl, rh in receivers if rl > layer for i in cfg.path_inputs]
    expected += [(s, (model.cfg.n_layers, -1), "logits") for s in senders] if logits else []
    if not expected:
        return []
    cell = lambda s, r, i: dict(  # noqa: E731
        component=comp,
        sender_layer=s[0],
        sender_head=s[1],
        receiver_layer=r[0],  # noqa: E731
        receiver_head=r[1],
        receiver_input=i,
    )
    if plog is not None:
        got = [plog.get(**base, **cell(s, r, i)) for s, r, i in expected]
        if all(g is not None for g in got):
            return got
    rows = path_sweep(
        model,
        runs,
        senders,
        [r for r in receivers if r[0] > layer],
        components=[comp],
        inputs=cfg.path_inputs,
        logits=logits,
        direction=direction,
        positions=cfg.positions,
        frame=cfg.frame,
        through_mlps=cfg.through_mlps,
        max_rows=cfg.max_rows,
    )
    by_cell = {
        (r["sender_layer"], r["sender_head"], r["receiver_layer"], r["receiver_head"], r["receiver_input"]): {
            **base,
            **r,
        }
        for r in rows
    }
    rows = [by_cell[(*s, *r, i)] for s, r, i in expected]
    if plog is not None:
        plog.extend(r for r in rows if not plog.done(**{k: r[k] for k in PATH_LOG_KEY}))
    return rows


def _path_effect_row(row: dict, runs: TaskRuns, cfg: PatchingConfig) -> dict:
    return _effect_row(row, runs, cfg, key=(*PATH_LOG_KEY[:-1], "kv_head"))


def _effect_row(row: dict, runs: TaskRuns, cfg: PatchingConfig, key: Sequence[str] = LOG_KEY[:-1]) -> dict:
    """A log row's ``key`` columns and its effect test (effect, CI, n, se, p)."""
    clean, corrupted = runs.clean.metric.numpy(), runs.corrupted.metric.numpy()
    t = effect_test(row["patched"], clean, corrupted, row["direction"])
    return {
        **{k: row[k] for k in key},
        "effect": t["effect"],
        "ci_low": t["ci_low"],
        "ci_high": t["ci_high"],
        "n": len(row["patched"]),
        "se": t["se"],
        "p": t["p"],
    }


# prompt lengths in tokens, BOS included, measured on SmolLM2's tokenizer (the planner has no tokenizer)
PROMPT_TOKENS = {
    "ioi": 18,
    "agreement": 4,
    "greater_than": 15,
    "induction": 20,
    "predecessor": 13,
    "lookback": 14,
    "tracr": 6,
}  # tracr: BOS + the zoo programs' max_seq_len
ATTRIBUTION_PASSES = 3.0  # forward + backward of the target run, in forwards


def plan(shape, cfg: PatchingConfig) -> list:
    """Per task: the clean and corrupted runs, attribution (forward + backward), and the exact sweep as
    the forward tokens it runs (resumed blocks only: a forward from block ``l`` costs ``(n - l) / n``)."""
    from ..planner import Work

    n = shape.n_layers
    layers = list(cfg.layers) if cfg.layers is not None else list(range(n))
    resumed = sum((n - l) / n for l in layers)  # full forwards' worth, one copy of the prompts per block
    out = []
    for task in cfg.tasks:
        L = PROMPT_TOKENS[task] if isinstance(task, str) else int(task.clean.shape[1])
        task = task if isinstance(task, str) else task.name
        prompts = task_prompts(cfg, task) * L
        per_token = n * (4 * shape.d_model + (shape.n_heads + shape.n_kv_heads) * shape.d_head + shape.n_heads * L)
        kept = 2 * prompts * per_token * 4  # both runs' cached activations, float32
        out.append(
            Work(
                f"{task}: clean + corrupted", 2 * prompts, L, cfg.batch_size, kept_bytes=kept, note="cached activations"
            )
        )
        if "attribution" in cfg.methods:
            out.append(
                Work(
                    f"{task}: attribution",
                    int(ATTRIBUTION_PASSES * prompts),
                    L,
                    cfg.batch_size,
                    kept_bytes=kept,
                    note=f"{len(cfg.components)} components, forward + backward",
                )
            )
        if "exact" in cfg.methods:
            scopes = [get_component(c).scope for c in cfg.exact_set()]
            reps = sum(shape.n_heads if s == "head" else 1 for s in scopes)
            n_prompts = task_prompts(cfg, task)  # a head component's forward: a copy of them per head
            rows = n_prompts * (heads_per_forward(shape.n_heads, n_prompts, cfg.max_rows) if "head" in scopes else 1)
            out.append(
                Work(
                    f"{task}: exact",
                    int(reps * resumed * prompts),
                    L,
                    rows,
                    kept_bytes=kept,
                    note=f"{len(cfg.exact_set())} components x {len(layers)} blocks, resumed",
                )
            )
        if "paths" in cfg.methods:  # per sender: its pass, then per receiver and input one resumed pass
            senders = parse_heads(cfg.path_senders, n, shape.n_heads, field="path_senders")[0]
            receivers, logits = parse_heads(
                cfg.path_receivers, n, shape.n_heads, field="path_receivers", allow_logits=True
            )
            per = sum(
                (n - sl) / n + len(cfg.path_inputs) * sum((n - rl) / n for rl, _ in receivers if rl > sl)
                for sl, _ in senders
            )
            out.append(
                Work(
                    f"{task}: paths",
                    int(len(cfg.path_components) * per * prompts),
                    L,
                    cfg.max_rows,
                    kept_bytes=kept,
                    note=f"{len(senders)} senders x {len(receivers) + logits} receivers, "
                    f"{len(cfg.path_components)} components",
                )
            )
    return [w for w in out for _ in cfg.directions]


def support(family: Family) -> Support:
    """Patching on ``family``: heads need attention; a norm after W_O leaves out the heads' parallel parts."""
    if not family.attention:
        return Support("no", f"patching heads needs attention heads: {family.name} has none")
    if family.post_norms:
        return Support(
            "differs",
            "head_par / head_perp left out: a norm follows W_O, so the heads' writes do not add up to hook_attn_out",
        )
    return Support("yes")


ANALYSIS = register_analysis(
    Analysis(
        "patching",
        PatchingConfig,
        run,
        PatchingResult,
        units,
        "geometry-resolved activation patching: heads' parallel, perpendicular, self and non-self writes",
        tiny=dict(tasks=("induction",), prompts=4, min_accuracy=0.0, layers=(0, 1)),
        cost=unit_cost,
        plan=plan,
        support=support,
        docs="analyses/patching",
    )
)
