"""``tlgeo geometries``: its flags are :class:`~tlgeo.geometries.config.GeometriesConfig`'s fields."""

from __future__ import annotations

import argparse

from ..runner.analysis import Command
from ..runner.cliargs import LoadConfig, add_config_args, add_out_arg, print_written
from .config import GeometriesConfig

__all__ = ["COMMANDS"]

HELP = "one token, four geometries: the four analyses' per-token quantities on one pool, and their relations"
DESCRIPTION = (
    "Collect one token pool (WikiText windows), measure per token and block the parallel ratios of the "
    "attention, MLP and exclude-self updates, the loss change under L2-matched angle and magnitude "
    "perturbations, the P/D/S/F energy shares around the model's own prediction and its logit-lens "
    "rank, and the local linear tokenwise fit's error; then Spearman correlations between every pair "
    "per block, with bootstrap CIs and p-values over windows, Benjamini-Hochberg q-values over all pairs x "
    "blocks, shuffled-within-window baselines, and partial correlations given position and token "
    "frequency, and given those and the token's atypicality (its state's norm, its mean distance to its "
    "tokenwise neighbours). Resumable by block."
)
SHOWN = 8  # strongest relations printed
MIN_POOL_WINDOWS = 16  # the CIs resample windows: with fewer, the relations are an indication only
LEGEND = "\n".join(
    (
        "P/D/S/F: shares of ||h_{l+1}||^2 on the model's own prediction direction (P), the pool's top principal",
        "  subspace of the rest (D), the next one (S) and the remainder (F); tok_error: the local linear tokenwise",
        "  fit's relative error.",
        "significant: blocks whose 95% CI (windows resampled) excludes 0; significant_bh: blocks with",
        "  Benjamini-Hochberg q < 0.05 over all pairs x blocks (p: |rho| / bootstrap SE against Student's t over",
        "  the windows).",
        "partial: rho given position and token frequency; partial_atypical: given those, the state's norm and the",
        "  mean distances of h_l and h_l+1 to their k nearest pool states (both sides may only track how atypical",
        "  a token is);",
        "  shuffled: rho after shuffling each quantity within its window (what windows, not tokens, share).",
    )
)


def add_args(p: argparse.ArgumentParser) -> None:
    LoadConfig.add_args(p)
    add_config_args(p, GeometriesConfig)
    add_out_arg(p, "runs/<model>")


def run_command(args: argparse.Namespace) -> int:
    from ..data import load_text
    from ..decomposition.summary import indication_note
    from ..runner.distributed import run_command as run
    from .analysis import ANALYSIS, FDR, GeometriesResult, relation_summary

    res, cfg, out = run(
        ANALYSIS,
        args,
        check=lambda cfg: load_text(cfg.corpus),  # an unknown corpus fails first
        prepare=lambda model, cfg, out: cfg.chosen_layers(model.cfg.n_layers),
    )  # blocks out of range
    if res is None:  # a torchrun rank other than 0: rank 0 writes
        return 0
    rel = res.relations.dropna(subset=["rho"])
    real = rel[(rel["ci_low"] > 0) | (rel["ci_high"] < 0)]
    n_windows = int(res.tokens["window"].nunique())
    small = indication_note(n_windows, MIN_POOL_WINDOWS, "windows")
    print(
        f"\n{len(real)} of {len(rel)} block x pair correlations have a 95% CI that excludes 0, "
        f"{int((res.relations['q_bh'] < FDR).sum())} have a Benjamini-Hochberg q < {FDR}{small}. The strongest "
        f"between quantities of two analyses, over {rel['layer'].nunique()} blocks:"
    )
    print(relation_summary(res.relations).head(SHOWN).round(3).to_string(index=False))
    print(LEGEND)
    if small:
        print(
            f"Indication only: a pool of {n_windows} windows ({int(res.tokens['index'].nunique())} tokens); the "
            f"CIs and q-values need at least {MIN_POOL_WINDOWS} windows (give more --tokens)."
        )
    print_written([out / GeometriesResult.table(n).filename for n in ("tokens", "relations")])
    return 0


COMMANDS = (Command("geometries", HELP, add_args, run_command, DESCRIPTION),)
