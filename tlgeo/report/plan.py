"""``tlgeo plan``: what an analysis will cost on a model, from the model's config alone."""

from __future__ import annotations

import argparse

import pandas as pd

from ..analysis import Command
from ..cliargs import config_from_args

__all__ = ["COMMANDS", "plan_table"]

DESCRIPTION = ("Forward tokens, FLOPs, peak memory (weights, one forward's activations, what the step keeps on the "
               "device, what it keeps in host memory, and on a CPU the process) and time of each step of an analysis, "
               "from the model's config.json only: no weights, no network. --model takes what every command takes, a "
               "config.json, or a seed paper's model by hub id (tlgeo.planner.SEED_MODELS). The analysis's own flags "
               "follow its name, as on its command: tlgeo plan --model Qwen/Qwen3-8B --device h200 --dtype bfloat16 "
               "run --tokens 8192. CPU times are measured on a 2-core machine (machines of its kind differ ~2x); GPU "
               "times assume tlgeo.planner.GPU_EFFICIENCY of the peak bf16 FLOP/s for the forwards. Host work that is "
               "not a forward (fits, probes, loading, generation's per-step calls: cpu_s) is counted as measured on "
               "the CPU, on every device; host memory (host_gib: state pools, CPU copies) is in the peak on a CPU and "
               "beside it on a GPU.")
COLUMNS = ["step", "forward_tokens", "tflops", "seconds", "cpu_s", "weights_gib", "activations_gib", "kept_gib",
           "host_gib", "peak_gib", "fits", "note"]


def _plannable() -> dict:
    from .registry import load_analyses

    return {a.command_name: a for a in load_analyses().values() if a.plan is not None}


def add_args(p: argparse.ArgumentParser) -> None:
    from ..planner import DEVICES

    p.add_argument("--model", default="smollm2-135m",
                   help="tiny:<kind>, an embedded model, a directory or config.json, or a seed model's hub id")
    p.add_argument("--device", default="cpu", choices=tuple(DEVICES), help="the device estimated for")
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="the weights (default: float32 on cpu, bfloat16 on a GPU)")
    p.add_argument("analysis", choices=tuple(_plannable()), help="the command whose run is planned")
    p.add_argument("flags", nargs=argparse.REMAINDER, help="that command's flags (its config)")


def _config_parser(command: str, config: type) -> argparse.ArgumentParser:
    """Every flag of ``tlgeo <command>`` as that command names them (``tlgeo tokenwise``'s
    ``--patch-tokens``), none required: a command line that runs is a command line that plans. Its
    config flags make the plan; the others (output, threads, placement) are accepted and change nothing
    the planner counts."""
    from .registry import load_commands

    full = argparse.ArgumentParser(prog=f"tlgeo plan {command}", add_help=False, exit_on_error=False)
    load_commands()[command].add_args(full)
    for action in full._actions:
        action.required = False
    return full


def plan_table(model, command: str, flags: list[str] = (), device: str = "cpu",
               dtype: str | None = None) -> pd.DataFrame:
    """The planner's rows for ``tlgeo <command> <flags>`` on ``model`` (a name, or its
    :class:`~tlgeo.planner.ModelShape`; :func:`tlgeo.planner.estimate`)."""
    from ..planner import DEVICES, ModelShape, estimate, model_shape, start_seconds

    a = _plannable()[command]
    sub = _config_parser(command, a.config)
    try:
        parsed, extra = sub.parse_known_args(list(flags))
    except argparse.ArgumentError as e:
        raise ValueError(str(e)) from None
    if extra:
        raise ValueError(f"not flags of tlgeo {command}: {' '.join(extra)}")
    cfg = config_from_args(a.config, parsed)
    shape = model if isinstance(model, ModelShape) else model_shape(model)
    cfg, cut = cfg.fit_to(shape.n_ctx) if hasattr(cfg, "fit_to") else (cfg, [])  # as the command does
    dtype = dtype or ("bfloat16" if DEVICES[device].gpu else "float32")
    df = estimate(shape, a.plan(shape, cfg), device, dtype)
    start = pd.DataFrame([{"step": "start", "seconds": start_seconds(shape, dtype),
                           "note": "imports and booting the model from a local folder"}])
    body, total = df[df["step"] != "total"], df[df["step"] == "total"].copy()
    total["seconds"] += start["seconds"].iloc[0]
    out = pd.concat([start, body, total], ignore_index=True).assign(model=shape.name, device=device, dtype=dtype)
    out.attrs["notes"] = cut  # defaults the model's context cut, as the command cuts them
    return out


def run_command(args: argparse.Namespace) -> int:
    from ..planner import DEVICES, model_shape

    shape = model_shape(args.model)
    df = plan_table(shape, args.analysis, args.flags, args.device, args.dtype)
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
