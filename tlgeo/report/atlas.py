"""``tlgeo atlas``: one model, every registered analysis step, one HTML report + CSVs.

Each analysis chapter contributes its steps (:mod:`tlgeo.report.registry` lists the contributing
modules; :mod:`tlgeo.runner.analysis` is the contract). A step is a registered analysis's own run, with a
config made from the atlas budgets, exactly as its command runs it into the output folder (the
same tables, resumed from the same logs after an interruption), and a report section drawn from
its result, ending with that command line. ``python -c "import tlgeo.report.atlas as a;
print(a.STEPS)"`` lists the steps; :mod:`tlgeo.decomposition.atlas` describes the
directional-decomposition ones.

The report opens with each chapter's headline (:func:`tlgeo.runner.analysis.chapter_headline`),
recomputed from the CSVs after every step, so the partial report saved after a
step says what is known so far. Each step prints its start (clock time and
time since the run began) and its end; the steps show tqdm progress bars.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import InputError
from ..runner.cliargs import config_argv, default_out, model_key
from ..data import load_text
from ..runner.distributed import init, ranks, run_analysis
from ..models import input_device, load_model, model_label
from ..runner.identity import run_identity
from ..runner.results import current_run, run_state
from ..storage import write_csv, write_json
from ..runner.analysis import Config, StepContext, make_budgets, param
from .headline import set_headline
from .html import Report
from .registry import load_steps

__all__ = ["AtlasConfig", "STEPS", "run_atlas", "same_command", "step_config"]

STEPS: tuple[str, ...] = tuple(load_steps())


@dataclass(frozen=True)
class AtlasConfig(Config):
    """One atlas run: the model, the text, which steps, and the steps' budgets.

    ``budgets`` overrides budget fields by name (each analysis chapter declares
    its own in a dataclass, e.g. :class:`tlgeo.decomposition.atlas.DecompositionBudgets`;
    ``tlgeo atlas --help`` lists them all); unknown names are an error.
    ``steps=None`` runs every registered step. ``load``: the keyword arguments of
    :func:`tlgeo.models.load_model` (``device``, ``dtype``, ``device_map``, ...: :meth:`LoadConfig.load_kwargs`).
    """

    model: str = param("smollm2-135m", "the model (tlgeo.runner.cliargs.LoadConfig's --model)")
    corpus: str = param("wikitext2", "text for perplexity and the token pools")
    out: Path | None = param(None, "output directory (default: runs/atlas-<model>)")
    steps: tuple[str, ...] | None = param(None, "the steps run (default: all registered)")
    seed: int = param(0, "seed of every random choice")
    budgets: dict[str, Any] = field(default_factory=dict, metadata={"help": "budget fields by name"})
    load: dict[str, Any] = field(default_factory=dict, metadata={"help": "load_model's device, dtype, device_map, ..."})

    def out_dir(self) -> Path:
        return Path(self.out) if self.out else default_out(f"atlas-{model_key(self.model)}")

    def chapter_budgets(self) -> dict[str, Any]:
        """One budgets instance per chapter, with ``budgets`` applied."""
        return make_budgets(self.budgets)


def run_atlas(cfg: AtlasConfig, model=None) -> Path | None:
    """Run the chosen steps and write ``report.html`` + CSVs into ``cfg.out_dir()``.

    Under ``torchrun`` each step's analysis shares its work units out over the ranks
    (:func:`~tlgeo.runner.distributed.run_analysis`); rank 0 writes the merged tables and the report and returns
    its path, the other ranks return ``None``. Its steps are the atlas's work, not runs of their own: they
    record no provenance line (``tlgeo atlas`` records the atlas's)."""
    with run_state(command=True) if current_run() is None else contextlib.nullcontext():  # tlgeo atlas has one
        return _run_atlas(cfg, model)


@dataclass
class _AtlasRun:
    """What the steps of one atlas run share: its settings, model and report, and the timings they leave."""

    cfg: AtlasConfig
    model: Any
    registered: dict
    budgets: dict[str, Any]
    out: Path
    identity: Any
    report: Report
    scratch: Report  # another rank draws no section
    chapters: list[str]  # report order
    on_record: list[str]  # the steps of this and earlier runs (config.json's)
    r: Any  # the ranks
    t_run: float
    timings: dict[str, float] = field(default_factory=dict)
    peak_mb: dict[str, float] = field(default_factory=dict)


def _prepared(cfg: AtlasConfig, model) -> tuple[dict, list[str], dict[str, Any], Any]:
    """``(registered steps, chosen steps, budgets, model)``: every name checked before the model loads."""
    registered = load_steps()
    chosen = list(registered) if cfg.steps is None else list(cfg.steps)
    unknown = [s for s in chosen if s not in registered]
    if unknown:
        raise InputError(f"unknown atlas step(s) {unknown}; steps: {list(registered)}")
    budgets = cfg.chapter_budgets()  # unknown budget names fail here, before any work
    load_text(cfg.corpus)  # an unknown corpus fails here, before the model loads
    model = model if model is not None else load_model(cfg.model, **cfg.load)
    for b in budgets.values():
        if hasattr(b, "check"):
            b.check(model)
    return registered, chosen, budgets, model


def _record_config(
    cfg: AtlasConfig, out: Path, identity, registered: dict, chosen: list[str], budgets: dict, earlier: dict | None
) -> list[str]:
    """Write ``config.json`` (on rank 0) and return the steps it records: this run's and earlier runs'."""
    conf_json = {
        **{k: v for k, v in dataclasses.asdict(cfg).items() if k != "budgets"},
        "identity": identity.row(),
        "steps": [s for s in registered if s in chosen],
        "budgets": {chap: dataclasses.asdict(b) for chap, b in budgets.items()},
    }
    if earlier is not None:  # a partial rerun: the steps of earlier runs stay on record
        done = set(earlier.get("steps", ())) | set(chosen)
        conf_json["steps"] = [s for s in registered if s in done]
    if ranks().main:
        write_json(out / "config.json", conf_json, indent=2, default=str)
    return conf_json["steps"]


def _headline(run: _AtlasRun) -> None:
    """Set the report's headline from the CSVs written so far."""
    set_headline(
        run.report,
        run.budgets,
        run.out,
        run.chapters,
        _caveats(run.model, run.registered, run.on_record),
        compare=not _random_weights(run.model),
    )


def _run_step(run: _AtlasRun, i: int, n_todo: int, name: str, step) -> None:
    """Run step ``i`` of ``n_todo``, draw its section and (on rank 0) time it and save the partial report."""
    cfg, r, report = run.cfg, run.r, run.report
    conf = step_config(step, cfg, run.budgets)
    number = list(run.registered).index(name) + 1  # its place in the whole atlas: the same in a partial run
    ctx = StepContext(cfg, report if r.main else run.scratch, run.budgets[step.chapter], conf, number)
    t = time.perf_counter()
    if r.main:
        print(
            f"[atlas] step {i}/{n_todo} {name} ({step.description}): started {time.strftime('%H:%M:%S')}, "
            f"{_duration(t - run.t_run)} into the run",
            flush=True,
        )
    if conf is not None:  # None: skipped at these budgets
        # the analysis's own run, as its command runs it (under torchrun: its units over the ranks, merged
        # on rank 0, which draws the section)
        result = run_analysis(step.analysis, run.model, conf, out=run.out, progress=r.main)
        if r.main:
            report.numbered(number)
            step.render(ctx, result)
            report.numbered(None)
            report.text(f"The same tables from the command line: {same_command(step, cfg, conf)}.", note=True)
    _release_memory()
    if not r.main:
        return
    run.timings[name] = time.perf_counter() - t
    run.peak_mb[name] = _peak_rss_mb()
    wrote = [f for f in step.files if (run.out / f).exists()]
    print(
        f"[atlas] step {i}/{n_todo} {name} done in {_duration(run.timings[name])} at "
        f"{time.strftime('%H:%M:%S')} ({_duration(time.perf_counter() - run.t_run)} into the run; "
        f"peak RSS so far {run.peak_mb[name]:.0f} MB; {', '.join(wrote) or 'no CSV'})",
        flush=True,
    )
    _headline(run)
    report.save(run.out / "report.html")  # a partial report after every step, headline of what is done


def _finish(run: _AtlasRun, started: str, bare_start: float, n_todo: int) -> Path:
    """Print the run's total, append its timings to ``timings.csv``, add the Timings section, save the report."""
    model, out, r, timings = run.model, run.out, run.r, run.timings
    total = time.perf_counter() - run.t_run
    bare_end = bare_forward_seconds(model)
    bare = (bare_start + bare_end) / 2  # measured before and after the steps: a machine that drifted counts half
    print(
        f"[atlas] all {n_todo} step(s) done in {_duration(total)} = {total / bare:.0f} bare "
        f"{BARE_SHAPE[0]}x{_bare_len(model)}-token forwards ({bare:.2f} s each: {bare_start:.2f} s before the "
        f"steps, {bare_end:.2f} s after); report: {out / 'report.html'}",
        flush=True,
    )
    table = pd.DataFrame(
        {
            "run": started,
            "step": list(timings),
            "seconds": list(timings.values()),
            "bare_forwards": [t / bare for t in timings.values()],
            "peak_rss_mb_so_far": [run.peak_mb[k] for k in timings],
        }
    )
    path = out / "timings.csv"  # one block of rows per run, appended (a rerun of cached steps takes ~0 s)
    earlier = pd.read_csv(path) if path.exists() else None
    write_csv(path, pd.concat([earlier, table], ignore_index=True))
    run.report.section("Timings").table(
        table.drop(columns=["run"]).rename(
            columns={"peak_rss_mb_so_far": "peak RSS so far (MB)", "bare_forwards": "in bare forwards"}
        ),
        f"Wall time of each step of this run (s; what an earlier run finished is loaded or resumed, ~0 s), the same "
        f"as a multiple of one bare {BARE_SHAPE[0]}x{_bare_len(model)}-token forward of this model measured "
        f"before and after the steps ({bare:.2f} s, the mean of {bare_start:.2f} and {bare_end:.2f} s; the whole "
        f"run: {total / bare:.0f}x), and the process's peak "
        f"resident memory after it"
        + (
            f"; under torchrun ({r.size} ranks) every step's units are shared out over "
            "the ranks: rank 0's time and memory"
            if r.size > 1
            else ""
        )
        + f". Every run's rows: {path}.",
    )
    _headline(run)
    return run.report.save(out / "report.html")


def _run_atlas(cfg: AtlasConfig, model=None) -> Path | None:
    registered, chosen, budgets, model = _prepared(cfg, model)
    out = cfg.out_dir()
    identity = run_identity(model)
    earlier = json.loads((out / "config.json").read_text()) if (out / "config.json").exists() else None
    _check_same_model(out, earlier, identity)  # one atlas, one model: before any file is written
    out.mkdir(parents=True, exist_ok=True)
    on_record = _record_config(cfg, out, identity, registered, chosen, budgets, earlier)
    report = Report(f"tlgeo atlas: {cfg.model}", digits=3)  # three significant digits: for reading
    report.text(
        f"Model {cfg.model} ({model.cfg.n_layers} layers, d_model {model.cfg.d_model}, "
        f"{model.cfg.n_heads} heads / {model.cfg.n_key_value_heads or model.cfg.n_heads} KV heads); "
        f"text: {cfg.corpus}. Every number below: {identity}. Budgets: {out / 'config.json'}.",
        note=True,
    )
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    bare = bare_forward_seconds(model)  # the run's unit of time: machines of one kind differ ~2x
    todo = [(name, step) for name, step in registered.items() if name in chosen]
    chapters = list(dict.fromkeys(step.chapter for step in registered.values()))  # report order
    t_run = time.perf_counter()
    r = init(input_device(model))
    print(
        f"[atlas] {cfg.model}: {len(todo)} step(s) ({', '.join(n for n, _ in todo)}) into {out}"
        + (f" over {r.size} ranks" if r.size > 1 else "")
        + f", started {time.strftime('%H:%M:%S')}",
        flush=True,
    )
    scratch = Report("scratch")  # another rank draws no section
    run = _AtlasRun(cfg, model, registered, budgets, out, identity, report, scratch, chapters, on_record, r, t_run)
    gc.collect()
    gc.freeze()  # what exists now (modules, the model) is no step's garbage: each step's collection skips it
    try:
        for i, (name, step) in enumerate(todo, 1):
            _run_step(run, i, len(todo), name, step)
    finally:
        gc.unfreeze()
    if not r.main:
        return None
    return _finish(run, started, bare, len(todo))


def step_config(step, cfg: AtlasConfig, budgets: dict[str, Any]):
    """The analysis config of an analysis ``step`` (:func:`tlgeo.runner.analysis.register_analysis_step`) from its
    chapter's budgets (``None``: the budgets skip it); a config with a ``corpus`` or a ``seed`` takes the atlas's."""
    conf = step.config(budgets[step.chapter])
    if conf is None:
        return None
    fields = {f.name for f in dataclasses.fields(conf)}
    return conf.replace(**{k: v for k, v in (("corpus", cfg.corpus), ("seed", cfg.seed)) if k in fields})


def same_command(step, cfg: AtlasConfig, conf) -> str:
    """The ``tlgeo`` command line that runs an analysis ``step``'s analysis with ``conf``, as the atlas does."""
    line = shlex.join(["tlgeo", step.analysis.command_name, "--model", cfg.model, *config_argv(conf)])
    return line + (f" (with this run's model flags: {', '.join(sorted(cfg.load))})" if cfg.load else "")


def _check_same_model(out: Path, earlier: dict | None, identity) -> None:
    """An atlas folder holds one model's results: a rerun with another model, dtype, device class,
    placement or tlgeo version (an ``identity`` other than the one in ``config.json``) is refused."""
    if earlier is None:
        return
    old = earlier.get("identity")
    if old is None:
        raise InputError(
            f"--out {out} holds an atlas run whose model identity was not recorded (an older tlgeo): give another --out"
        )
    if old != identity.row():
        differ = ", ".join(f"{k} {old.get(k)} -> {v}" for k, v in identity.row().items() if old.get(k) != v)
        raise InputError(f"--out {out} holds the atlas of another model run ({differ}): give another --out")


BARE_SHAPE = (4, 256)  # a bare forward of 4 windows of 256 tokens: the atlas's unit of time


def _bare_len(model) -> int:
    return min(BARE_SHAPE[1], model.cfg.n_ctx)


def bare_forward_seconds(model, repeats: int = 3) -> float:
    """Median wall time of a bare ``4 x 256``-token forward of ``model`` (no hooks; one warm-up first)."""
    import statistics

    import torch

    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, model.cfg.d_vocab, (BARE_SHAPE[0], _bare_len(model)), generator=g)
    tokens = tokens.to(input_device(model))
    times = []
    with torch.no_grad():
        for i in range(repeats + 1):
            t = time.perf_counter()
            model(tokens, return_type=None)
            if i:
                times.append(time.perf_counter() - t)
    return statistics.median(times)


def _random_weights(model) -> bool:
    return model_label(model).startswith("tiny:")


def _caveats(model, registered: dict, done: list[str]) -> list[str]:
    """What the reader must know before any number: a model with random weights, steps not run."""
    out = []
    if _random_weights(model):
        out.append(
            f"{model_label(model)} is a tiny model with random weights: the report tests the machinery; no "
            "number in it says anything about the papers' claims, so this headline compares none with them "
            "(the sections' paper columns do not apply)."
        )
    skipped = [s for s in registered if s not in done]
    if skipped:
        out.append(f"Steps not run: {', '.join(skipped)} (tlgeo atlas --steps chose the others).")
    return out


def _duration(seconds: float) -> str:
    """``42 s``, ``5 min 10 s``, ``1 h 02 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{seconds:.1f} s" if seconds < 10 else f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _release_memory() -> None:
    """Hand what a finished step freed back to the system (glibc keeps freed heap pages for the process;
    the next step's peak would stand on them)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass


def _peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (``nan`` where unknown)."""
    try:
        import resource
        import sys

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB on Linux
    except (ImportError, OSError):
        return float("nan")
