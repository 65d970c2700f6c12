"""``tlgeo geometries``: its flags are :class:`~tlgeo.geometries.config.GeometriesConfig`'s fields."""

from __future__ import annotations

import argparse

from ..analysis import Command
from ..cliargs import (add_config_args, add_model_arg, add_out_arg, add_threads_arg, config_from_args, model_key,
                       model_kwargs, output_dir, print_written, set_threads)
from .config import GeometriesConfig

__all__ = ["COMMANDS"]

HELP = "one token, four geometries: the four analyses' per-token quantities on one pool, and their relations"
DESCRIPTION = ("Collect one token pool (WikiText windows), measure per token and block the parallel ratios of the "
               "attention, MLP and exclude-self updates, the loss change under L2-matched angle and magnitude "
               "perturbations, the P/D/S/F energy shares around the model's own prediction and its logit-lens "
               "rank, and the local linear tokenwise fit's error; then Spearman correlations between every pair "
               "per block, with bootstrap CIs over windows, shuffled-within-window baselines and partial "
               "correlations given position and token frequency. Resumable by block.")
SHOWN = 8  # strongest relations printed


def add_args(p: argparse.ArgumentParser) -> None:
    add_model_arg(p)
    add_config_args(p, GeometriesConfig)
    add_out_arg(p, "runs/<model>")
    add_threads_arg(p)


def run_command(args: argparse.Namespace) -> int:
    from ..data import load_text
    from ..distributed import run_analysis
    from ..models import load_model
    from .analysis import ANALYSIS, GeometriesResult, relation_summary

    set_threads(args)
    cfg = config_from_args(GeometriesConfig, args)  # bad values fail here, before the model loads
    load_text(cfg.corpus)  # an unknown corpus too
    out = output_dir(args, model_key(args.model))
    model = load_model(args.model, **model_kwargs(args))
    cfg.chosen_layers(model.cfg.n_layers)  # blocks out of range fail before any forward
    res = run_analysis(ANALYSIS, model, cfg, out=out, progress=True)
    if res is None:  # a torchrun rank other than 0: rank 0 writes
        return 0
    rel = res.relations.dropna(subset=["rho"])
    real = rel[(rel["ci_low"] > 0) | (rel["ci_high"] < 0)]
    print(f"\n{len(real)} of {len(rel)} block x pair correlations have a 95% CI that excludes 0. The strongest "
          f"between quantities of two analyses, over {rel['layer'].nunique()} blocks:")
    print(relation_summary(res.relations).head(SHOWN).round(3).to_string(index=False))
    print_written([out / GeometriesResult.table(n).filename for n in ("tokens", "relations")])
    return 0


COMMANDS = (Command("geometries", HELP, add_args, run_command, DESCRIPTION),)
