"""``tlgeo plan``: what an analysis will cost on a model, from the model's config alone."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Sequence

import pandas as pd

from ..errors import InputError
from ..runner.analysis import Command
from ..runner.cliargs import config_from_args

__all__ = ["COMMANDS", "plan_table", "plannable", "plan_argv"]

DESCRIPTION = (
    "Forward tokens, FLOPs, peak memory (weights, one forward's activations, what the step keeps on the "
    "device, what it keeps in host memory, and on a CPU the process) and time of each step of an analysis, "
    "from the model's config.json only: no weights, no network. --model takes what every command takes, a "
    "config.json, or a seed paper's model by hub id (its published config.json, kept in tlgeo: "
    "tlgeo.families.checkpoints.SEED_CHECKPOINTS). The analysis's own flags "
    "follow its name, as on its command: tlgeo plan --model Qwen/Qwen3-8B --device h200 --dtype bfloat16 "
    "decompose --tokens 8192; its flags may also come before the name (tlgeo plan --threads 1 --model "
    "smollm2-135m decompose). Every time is priced by the planner's calibration table "
    "(tlgeo/planner_calibration.csv, written by scripts/bench_plan.py --calibrate: the machine it was "
    "measured on, per kind of work, dtype and thread count; CPUs differ ~2x), the command's start-up "
    "(imports, loading the model by its size and format) included and shown as the start-up rows; GPU "
    "times assume tlgeo.planner.GPU_EFFICIENCY of the peak bf16 FLOP/s for the forwards. Host work that is "
    "not a forward (fits, probes, loading, generation's per-step calls: cpu_s) is counted as measured on "
    "the calibration's CPU, on every device; host memory (host_gib: state pools, CPU copies) is in the "
    "peak on a CPU and beside it on a GPU."
)
COLUMNS = [
    "step",
    "forward_tokens",
    "tflops",
    "seconds",
    "cpu_s",
    "weights_gib",
    "activations_gib",
    "kept_gib",
    "host_gib",
    "peak_gib",
    "fits",
    "note",
]


def plannable() -> dict:
    """The analyses ``tlgeo plan`` plans, by command name (those whose record has a ``plan``)."""
    from .registry import load_analyses

    return {a.command_name: a for a in load_analyses().values() if a.plan is not None}


PLAN_MODEL = "smollm2-135m"  # planned when no --model is given
OWN_FLAGS = {"--model": 1, "--device": 1, "--dtype": 1, "-h": 0, "--help": 0}  # tlgeo plan's own, and their values


def plan_argv(argv: Sequence[str]) -> list[str]:
    """``tlgeo plan``'s arguments with the analysis's flags given before its name moved after it, as a user reads
    ``tlgeo plan --threads 1 --model smollm2-135m decompose``: the plan's own flags (:data:`OWN_FLAGS`) stay, the
    first word that names a planned command (or ``atlas``) is the analysis, and every other word before it follows
    it, in order (the value of a plan's own flag is never taken for the name; a command's flag whose value is a
    command's name goes after the name)."""
    argv, names = list(argv), {*plannable(), "atlas"}
    own, moved, i = [], [], 0
    while i < len(argv):
        word = argv[i]
        if word in names:
            return [*own, word, *moved, *argv[i + 1 :]]
        if word in OWN_FLAGS:
            own += argv[i : i + 1 + OWN_FLAGS[word]]
            i += 1 + OWN_FLAGS[word]
        elif word.split("=", 1)[0] in OWN_FLAGS:
            own.append(word)
            i += 1
        else:
            moved.append(word)
            i += 1
    return argv  # no analysis named: argparse says so


class _PlanParser(argparse.ArgumentParser):
    """``tlgeo plan``'s parser: its arguments reordered by :func:`plan_argv` before they are parsed."""

    def parse_known_args(self, args=None, namespace=None):
        return super().parse_known_args(None if args is None else plan_argv(args), namespace)


def add_args(p: argparse.ArgumentParser) -> None:
    from ..planner import DEVICES

    if not isinstance(p, _PlanParser):  # the subcommand's parser, made by tlgeo's: the same, with the reordering
        p.__class__ = type("PlanParser", (_PlanParser, type(p)), {})
    p.add_argument(
        "--model",
        default=PLAN_MODEL,
        help="tiny:<kind>, an embedded model, a directory or config.json, or a seed model's hub id",
    )
    p.add_argument("--device", default="cpu", choices=tuple(DEVICES), help="the device estimated for")
    p.add_argument(
        "--dtype",
        default=None,
        choices=("float32", "bfloat16", "float16"),
        help="the weights (default: float32 on cpu, bfloat16 on a GPU)",
    )
    p.add_argument(
        "analysis",
        choices=(*plannable(), "atlas"),
        help="the command whose run is planned (its flags before or after it)",
    )
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


def _work(shape, command: str, flags: list[str], cal) -> tuple[list, list[str], argparse.Namespace]:
    """The planner's work of ``tlgeo <command> <flags>`` and the notes of defaults cut to the model's
    context; for ``atlas``, every chosen step's work (its analysis's plan of the step's config), each
    row named ``<step>: <its step>``."""
    parsed = _parse(command, flags)
    if command != "atlas":
        a = plannable()[command]
        cfg = config_from_args(a.config, parsed)
        cfg, cut = cfg.fit_to(shape.n_ctx) if hasattr(cfg, "fit_to") else (cfg, [])  # as the command does
        return [*a.plan(shape, cfg), _fixed(a.name)], cut, parsed
    from ..planner import Work
    from .atlas import step_config
    from .cli import atlas_config
    from .registry import load_steps

    atlas = atlas_config(parsed)
    budgets, work = atlas.chapter_budgets(), []
    for name, step in load_steps().items():
        conf = step_config(step, atlas, budgets) if atlas.steps is None or name in atlas.steps else None
        if conf is None or step.analysis.plan is None:
            continue
        work += [
            dataclasses.replace(w, step=f"{name}: {w.step}")
            for w in [*step.analysis.plan(shape, conf), _fixed(step.analysis.name)]
        ]
    work.append(
        Work(
            "report",
            0,
            1,
            host={"atlas.report": 1},
            host_bytes=cal.value("atlas.memory") * 2**30,
            note="the atlas's report: its tables and figures; its steps' modules resident",
        )
    )
    return work, [], parsed


def _fixed(analysis: str):
    """A run's work besides its planned steps: its data, its tables, figures and provenance (``run.<analysis>``, else
    ``run.any``)."""
    from ..planner import Work

    return Work("run", 0, 1, host={f"run.{analysis}|run.any": 1}, note="its data, tables, figures, provenance")


def plan_table(
    model, command: str, flags: list[str] = (), device: str = "cpu", dtype: str | None = None, calib=None
) -> pd.DataFrame:
    """The planner's rows for ``tlgeo <command> <flags>`` on ``model`` (a name, or its
    :class:`~tlgeo.planner.ModelShape`; :func:`tlgeo.planner.estimate`); ``command`` may be ``atlas``
    (every step of the atlas at its budgets). ``dtype``: the weights' (default: the flags' ``--dtype``, else
    bfloat16 on a GPU and float32 on a CPU); ``calib``: the calibration table priced by (default: the committed
    one, :func:`tlgeo.planner.calibration`). Its first rows are the command's start-up (``start-up: imports``,
    ``start-up: load``), its last the total, start-up included."""
    from ..planner import (
        DEVICES,
        DTYPE_BYTES,
        ModelShape,
        calibration,
        estimate,
        model_format,
        model_shape,
        start_seconds,
    )

    if command != "atlas" and command not in plannable():
        raise InputError(f"tlgeo plan: no plan for {command!r}; choose from {[*plannable(), 'atlas']}")
    cal = calib or calibration()
    shape = model if isinstance(model, ModelShape) else model_shape(model)
    work, notes, parsed = _work(shape, command, flags, cal)
    dev = DEVICES[device]
    dtype = dtype or _after(list(flags), "--dtype") or ("bfloat16" if dev.gpu else "float32")
    threads = getattr(parsed, "threads", None)
    df = estimate(shape, work, device, dtype, threads, cal)
    notes = [*notes, *_calibration_notes(cal, dev, dtype, threads)]
    fmt = model_format(shape.name)
    start = start_seconds(shape, dtype, fmt, threads, cal)
    gib = shape.params * DTYPE_BYTES[dtype] / 2**30
    start = pd.DataFrame(
        [
            {
                "step": "start-up: imports",
                "seconds": start["imports"],
                "note": "torch, transformers, TransformerLens, tlgeo's commands",
            },
            {
                "step": "start-up: load",
                "seconds": start["load"],
                "note": f"booting the model: {fmt}, {gib:.3g} GiB of weights",
            },
        ]
    )
    body, total = df[df["step"] != "total"], df[df["step"] == "total"].copy()
    total["seconds"] += start["seconds"].sum()
    out = pd.concat([start, body, total], ignore_index=True).assign(model=shape.name, device=device, dtype=dtype)
    out.attrs["notes"] = notes  # defaults the model's context cut, as the command cuts them; the calibration's reach
    out.attrs["start_seconds"] = float(start["seconds"].sum())
    return out


def _calibration_notes(cal, dev, dtype: str, threads: int | None) -> list[str]:
    """What the plan takes from the calibration that the command does not match: its threads, a half dtype."""
    if dev.gpu:
        return []
    notes, measured = [], cal.threads(dev.name) or cal.threads()
    if threads is not None and threads not in measured:  # without --threads: the most the table holds
        near = cal.row("forward.flops", dtype, threads, dev.name)["threads"]
        notes.append(f"--threads {threads}: planned at the calibration's {near} thread(s) (it holds {measured})")
    f32, own = dev.forward_flops("float32", threads, cal), dev.forward_flops(dtype, threads, cal)
    if dtype != "float32":
        notes.append(f"{dtype} weights on {dev.name}: the forwards take {f32 / own:.3g}x their time in float32")
        avx2 = _avx2_slowdown(cal, dtype, threads)
        if dev.name == "cpu" and f32 / own < avx2:
            notes.append(
                f"a CPU without {dtype} matrix units (AVX2 only: no AMX, no AVX512 half-precision) takes "
                f"{avx2:.3g}x float32's: --device cpu-avx2 plans that"
            )
    return notes


def _avx2_slowdown(cal, dtype: str, threads: int | None) -> float:
    """A forward in ``dtype`` over one in float32 on a CPU without half-precision matrix units (``cpu-avx2``)."""
    from ..planner import DEVICES

    avx2 = DEVICES["cpu-avx2"]
    return avx2.forward_flops("float32", threads, cal) / avx2.forward_flops(dtype, threads, cal)


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
    from ..planner import DEVICES, calibration, model_shape

    shape = model_shape(_planned_model(args))
    df = plan_table(shape, args.analysis, args.flags, args.device, _planned(args, "--dtype", args.dtype, None))
    print(
        f"{shape.name}: {shape.family}, {shape.n_layers} layers, d_model {shape.d_model}, {shape.n_heads} heads / "
        f"{shape.n_kv_heads} KV, {shape.params / 1e9:.3g} B parameters; on {DEVICES[args.device].note}, "
        f"{df['dtype'].iloc[0]} weights"
    )
    show = df.rename(columns={"cpu_seconds": "cpu_s"})
    show = show[[c for c in COLUMNS if c in show.columns]]
    print(show.to_string(index=False, na_rep="", float_format=lambda v: f"{v:.3g}"))
    start, total = df.attrs["start_seconds"], float(df.set_index("step").loc["total", "seconds"])
    print(
        f"start-up: {start:.3g} s of the total {total:.3g} s (the start-up rows: imports and loading the model), "
        f"the work {total - start:.3g} s"
    )
    if not DEVICES[args.device].gpu:
        print(f"calibration: {calibration().machine()} (tlgeo/planner_calibration.csv)")
    for note in df.attrs.get("notes", []):
        print(f"note: {note}")
    if not bool(df["fits"].dropna().all()):
        print(
            f"does not fit in {DEVICES[args.device].memory_gib:g} GiB: shard it (--device-map auto) or use "
            "smaller windows / batches"
        )
    return 0


COMMANDS = (
    Command(
        "plan",
        "what an analysis costs on a model (time, memory), from its config alone",
        add_args,
        run_command,
        DESCRIPTION,
    ),
)
