"""``tlgeo atlas``: one flag per budget of every registered analysis chapter."""

from __future__ import annotations

import argparse
import dataclasses

from ..errors import InputError
from ..runner.analysis import Command, budget_fields
from ..runner.cliargs import LoadConfig, NON_NEGATIVE, items, model_key, output_dir, print_written
from .registry import load_steps

__all__ = ["COMMANDS"]

DESCRIPTION = (
    "Every registered analysis step on one model: report.html + one CSV per table in --out. Finished steps "
    "are reused and unfinished ones resume from their logs, so rerun the same command after an "
    "interruption; use a new --out for new budgets. Costs in brackets say what a budget's run time grows "
    "with; tlgeo plan atlas [these flags] estimates each step's time and memory on a device, and a "
    "run's timings.csv records what each step took (measured atlases: docs/atlas.md). Under torchrun the "
    "steps are dealt out over the ranks."
)


def budget_flags(p: argparse.ArgumentParser) -> None:
    """One flag per budget field of every registered analysis chapter (``--<field-name>``)."""
    order = list(dict.fromkeys(step.chapter for step in load_steps().values()))  # report order
    fields = sorted(budget_fields().items(), key=lambda kv: order.index(kv[1][0]) if kv[1][0] in order else len(order))
    for name, (chapter, f) in fields:
        meta, default = f.metadata, f.default
        if default is dataclasses.MISSING:
            default = f.default_factory()  # type: ignore[misc]
        kind = meta.get("item")
        choices = meta.get("choices")
        if isinstance(default, tuple) or kind is not None:
            kind, metavar = items(kind or type(default[0])), "LIST"
            choices = None  # a list's items are checked by the config, not by argparse
            shown = (",".join(map(str, default)) or "none") if default is not None else None
        elif isinstance(default, bool):
            kind, metavar, shown = (lambda v: v.lower() in ("1", "true", "yes")), "BOOL", default
        else:
            kind, shown = type(default), default
            metavar = {int: "N", float: "X"}.get(kind, "NAME")
            if kind is int:
                kind = NON_NEGATIVE
        cost = f"; {meta['cost']}" if meta.get("cost") else ""
        p.add_argument(
            meta.get("flag", "--" + name.replace("_", "-")),
            dest=f"budget__{name}",
            type=kind,
            default=None,
            choices=choices,
            metavar=None if choices else metavar,
            help=f"{meta.get('help', '')} [{chapter}{'' if shown is None else f'; default {shown}'}{cost}]",
        )


def add_args(p: argparse.ArgumentParser) -> None:
    LoadConfig.add_args(p)
    p.add_argument("--corpus", default="wikitext2", help="text for perplexity and the token pools")
    p.add_argument("--out", default=None, help="output directory (default: runs/atlas-<model>)")
    p.add_argument(
        "--steps", default=None, help="comma-separated subset of: " + ",".join(load_steps()) + " (default: all)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    budget_flags(p)
    p.add_argument(
        "--decomposition-full-grids", action="store_true", help="the paper's full s_par / s_perp grids (slow)"
    )


def atlas_config(args: argparse.Namespace):
    """The :class:`~.atlas.AtlasConfig` of ``tlgeo atlas``'s parsed flags (unknown budgets and steps fail here)."""
    from .atlas import AtlasConfig

    budgets = {
        k.removeprefix("budget__"): v for k, v in vars(args).items() if k.startswith("budget__") and v is not None
    }
    if args.decomposition_full_grids:
        from ..decomposition.sweeps import S_PAR_GRID, S_PERP_GRID

        budgets.update(decomposition_s_par_grid=S_PAR_GRID, decomposition_s_perp_grid=S_PERP_GRID)
    steps = tuple(x for x in args.steps.split(",") if x) if args.steps else None
    unknown = [x for x in steps or () if x not in load_steps()]
    if unknown:
        raise InputError(f"--steps: unknown step(s) {unknown}; steps: {', '.join(load_steps())}")
    cfg = AtlasConfig(
        model=args.model,
        corpus=args.corpus,
        out=args.out,
        steps=steps,
        seed=args.seed,
        budgets=budgets,
        load=LoadConfig.of(args).load_kwargs(),
    )
    cfg.chapter_budgets()
    return cfg


def run_command(args: argparse.Namespace) -> int:
    from .atlas import run_atlas

    load = LoadConfig.of(args)
    load.set_threads()
    cfg = atlas_config(args)  # an unknown budget or step fails here, before the model loads
    args.record.settings = {
        f"budget__{k}": v for b in cfg.chapter_budgets().values() for k, v in dataclasses.asdict(b).items()
    }  # the budgets the run used, defaults included
    out = output_dir(args, f"atlas-{model_key(args.model)}")  # as cfg.out_dir(); an unwritable --out fails first
    skip = cfg.budgets.get("decomposition_skip_first", 1)
    print(f"[atlas] edits leave the first {skip} block(s) unedited; results in {out}")
    path = run_atlas(cfg)
    print_written(sorted(p for p in out.rglob("*") if p.is_file()))
    print(f"open {path} in a browser")
    return 0


COMMANDS = (
    Command(
        "atlas",
        "every registered analysis step on one model, as an HTML report + CSVs",
        add_args,
        run_command,
        DESCRIPTION,
    ),
)
