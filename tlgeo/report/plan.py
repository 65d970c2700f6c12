"""``tlgeo plan``: what an analysis will cost on a model, from the model's config alone."""

from __future__ import annotations

import argparse
import dataclasses

import pandas as pd

from ..errors import InputError
from ..runner.analysis import Command
from ..runner.cliargs import config_from_args

__all__ = ["COMMANDS", "plan_table"]

DESCRIPTION = ("Forward tokens, FLOPs, peak memory (weights, one forward's activations, what the step keeps on the "
               "device, what it keeps in host memory, and on a CPU the process) and time of each step of an analysis, "
               "from the model's config.json only: no weights, no network. --model takes what every command takes, a "
               "config.json, or a seed paper's model by hub id (its published config.json, kept in tlgeo: "
               "tlgeo.families.checkpoints.SEED_CHECKPOINTS). The analysis's own flags "
               "follow its name, as on its command: tlgeo plan --model Qwen/Qwen3-8B --device h200 --dtype bfloat16 "
               "decompose --tokens 8192. CPU times are at the FLOP/s measured on a reference CPU "
               "(scripts/bench_plan.py; CPUs differ ~2x, checked runs: results/plan-smollm2-135m); GPU "
               "times assume tlgeo.planner.GPU_EFFICIENCY of the peak bf16 FLOP/s for the forwards. Host work that is "
               "not a forward (fits, probes, loading, generation's per-step calls: cpu_s) is counted as measured on "
               "the reference CPU, on every device; host memory (host_gib: state pools, CPU copies) is in the peak on "
               "a CPU and beside it on a GPU.")
COLUMNS = ["step", "forward_tokens", "tflops", "seconds", "cpu_s", "weights_gib", "activations_gib", "kept_gib",
           "host_gib", "peak_gib", "fits", "note"]


def _plannable() -> dict:
    from .registry import load_analyses

    return {a.command_name: a for a in load_analyses().values() if a.plan is not None}


PLAN_MODEL = "smollm2-135m"  # planned when no --model is given


def add_args(p: argparse.ArgumentParser) -> None:
    from ..planner import DEVICES

    p.add_argument("--model", default=PLAN_MODEL,
                   help="tiny:<kind>, an embedded model, a directory or config.json, or a seed model's hub id")
    p.add_argument("--device", default="cpu", choices=tuple(DEVICES), help="the device estimated for")
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="the weights (default: float32 on cpu, bfloat16 on a GPU)")
    p.add_argument("analysis", choices=(*_plannable(), "atlas"), help="the command whose run is planned")
    p.add_argument("flags", nargs=argparse.REMAINDER, help="that command's flags (its config)")


def _config_parser(command: str) -> argparse.ArgumentParser:
    """Every flag of ``tlgeo <command>`` as that command names them (``tlgeo tokenwise``'s
    ``--patch-tokens``), none required: a command line that runs is a command line that plans. Its
    config flags make the plan; the others (output, threads, placement) are accepted and change nothing
    the planner counts."""
    from .registry import command_named

    full = argparse.ArgumentParser(prog=f"tlgeo plan {command}", add_help=False, exit_on_error=False)
    command_named(command).add_args(full)
    for action in full._actions:
        action.required = False
    return full


def _parse(command: str, flags: list[str]) -> argparse.Namespace:
    try:
        parsed, extra = _config_parser(command).parse_known_args(list(flags))
    except argparse.ArgumentError as e:
        raise InputError(str(e)) from None
    if extra:
        raise InputError(f"not flags of tlgeo {command}: {' '.join(extra)}")
    return parsed


def _work(shape, command: str, flags: list[str]) -> tuple[list, list[str], argparse.Namespace]:
    """The planner's work of ``tlgeo <command> <flags>`` and the notes of defaults cut to the model's
    context; for ``atlas``, every chosen step's work (its analysis's plan of the step's config), each
    row named ``<step>: <its step>``."""
    parsed = _parse(command, flags)
    if command != "atlas":
        a = _plannable()[command]
        cfg = config_from_args(a.config, parsed)
        cfg, cut = cfg.fit_to(shape.n_ctx) if hasattr(cfg, "fit_to") else (cfg, [])  # as the command does
        return a.plan(shape, cfg), cut, parsed
    from .atlas import step_config
    from .cli import atlas_config
    from .registry import load_steps

    atlas = atlas_config(parsed)
    budgets, work = atlas.chapter_budgets(), []
    for name, step in load_steps().items():
        conf = step_config(step, atlas, budgets) if atlas.steps is None or name in atlas.steps else None
        if conf is None or step.analysis.plan is None:
            continue
        work += [dataclasses.replace(w, step=f"{name}: {w.step}") for w in step.analysis.plan(shape, conf)]
    return work, [], parsed


def plan_table(model, command: str, flags: list[str] = (), device: str = "cpu",
               dtype: str | None = None) -> pd.DataFrame:
    """The planner's rows for ``tlgeo <command> <flags>`` on ``model`` (a name, or its
    :class:`~tlgeo.planner.ModelShape`; :func:`tlgeo.planner.estimate`); ``command`` may be ``atlas``
    (every step of the atlas at its budgets). ``dtype``: the weights' (default: the flags' ``--dtype``, else
    bfloat16 on a GPU and float32 on a CPU)."""
    from ..planner import CPU_THREADS, DEVICES, ONE_THREAD_SLOWDOWN, ModelShape, estimate, model_shape, start_seconds

    if command != "atlas" and command not in _plannable():
        raise InputError(f"tlgeo plan: no plan for {command!r}; choose from {[*_plannable(), 'atlas']}")
    shape = model if isinstance(model, ModelShape) else model_shape(model)
    work, notes, parsed = _work(shape, command, flags)
    dtype = dtype or _after(list(flags), "--dtype") or ("bfloat16" if DEVICES[device].gpu else "float32")
    df = estimate(shape, work, device, dtype)
    threads = getattr(parsed, "threads", None)
    if not DEVICES[device].gpu and threads == 1 < CPU_THREADS:  # the forwards on one core
        df["seconds"] = (df["seconds"] - df["cpu_seconds"]) * ONE_THREAD_SLOWDOWN + df["cpu_seconds"]
        notes = [*notes, f"--threads 1: the forwards take {ONE_THREAD_SLOWDOWN:g}x their time at the calibration's "
                         f"{CPU_THREADS} threads"]
    dev = DEVICES[device]
    slow, ref = dev.slowdown(dtype), "float32" if not dev.gpu else "bfloat16"
    if slow != 1:
        notes = [*notes, f"{dtype} weights on {device}: the forwards take {slow:.3g}x their time in {ref}"]
    if not dev.gpu and dtype != "float32" and slow < DEVICES["cpu-avx2"].slowdown(dtype):
        notes = [*notes, f"a CPU without {dtype} matrix units (AVX2 only: no AMX, no AVX512 half-precision) takes "
                         f"{DEVICES['cpu-avx2'].slowdown(dtype):.3g}x float32's: --device cpu-avx2 plans that"]
    start = pd.DataFrame([{"step": "start", "seconds": start_seconds(shape, dtype),
                           "note": "imports and booting the model from a local folder"}])
    body, total = df[df["step"] != "total"], df[df["step"] == "total"].copy()
    total["seconds"] += start["seconds"].iloc[0]
    out = pd.concat([start, body, total], ignore_index=True).assign(model=shape.name, device=device, dtype=dtype)
    out.attrs["notes"] = notes  # defaults the model's context cut, as the command cuts them; fewer threads
    return out


def _after(flags: list[str], name: str) -> str | None:
    """The value of ``name`` (``--model``) among a command's own flags, the last one given; ``None`` if absent."""
    own = None
    for i, f in enumerate(flags):
        if f == name and i + 1 < len(flags):
            own = flags[i + 1]
        elif f.startswith(name + "="):
            own = f.split("=", 1)[1]
    return own


def _planned(args: argparse.Namespace, name: str, before: str | None, unset: str | None) -> str | None:
    """``--model`` / ``--dtype`` before the command, or the command's own after it (a command line that runs is a
    command line that plans: ``tlgeo plan pdsf --model gemma3-270m``, ``tlgeo plan ppl --dtype bfloat16``)."""
    own = _after(list(args.flags), name)
    if own is None:
        return before
    if before not in (own, unset):
        raise InputError(f"two values of {name}: {before} before {args.analysis} and {own} after it")
    return own


def _planned_model(args: argparse.Namespace) -> str:
    """The model planned for (:func:`_planned`)."""
    return _planned(args, "--model", args.model, PLAN_MODEL)


def run_command(args: argparse.Namespace) -> int:
    from ..planner import DEVICES, model_shape

    shape = model_shape(_planned_model(args))
    df = plan_table(shape, args.analysis, args.flags, args.device, _planned(args, "--dtype", args.dtype, None))
    print(f"{shape.name}: {shape.family}, {shape.n_layers} layers, d_model {shape.d_model}, {shape.n_heads} heads / "
          f"{shape.n_kv_heads} KV, {shape.params / 1e9:.3g} B parameters; on {DEVICES[args.device].note}, "
          f"{df['dtype'].iloc[0]} weights")
    show = df.rename(columns={"cpu_seconds": "cpu_s"})
    show = show[[c for c in COLUMNS if c in show.columns]]
    print(show.to_string(index=False, na_rep="", float_format=lambda v: f"{v:.3g}"))
    for note in df.attrs.get("notes", []):
        print(f"note: {note}")
    if not bool(df["fits"].dropna().all()):
        print(f"does not fit in {DEVICES[args.device].memory_gib:g} GiB: shard it (--device-map auto) or use "
              "smaller windows / batches")
    return 0


COMMANDS = (Command("plan", "what an analysis costs on a model (time, memory), from its config alone", add_args,
                    run_command, DESCRIPTION),)
