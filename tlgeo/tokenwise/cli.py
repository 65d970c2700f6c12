"""``tlgeo tokenwise``: its flags are :class:`~tlgeo.tokenwise.config.TokenwiseConfig`'s fields."""

from __future__ import annotations

import argparse

from ..runner.analysis import Command
from ..runner.cliargs import LoadConfig, add_config_args, add_out_arg, print_written
from .config import TokenwiseConfig
from .paper import SPEARMAN_RANGE

__all__ = ["COMMANDS"]

HELP = "tokenwise layer maps: local kNN fits of h_{l+1} ~ A(x) x and what they leave"
DESCRIPTION = (
    "Collect every layer's token states over a corpus once (memory-mapped), fit local tokenwise maps on "
    "each token's nearest neighbours, measure the geometry of the residual per layer and class, and the "
    "KL of patching one token's state with its approximation, with Spearman(error, KL). Resumable."
)
MIN_PATCHED = 100  # patched tokens per layer and class below which a Spearman is an indication only (as the atlas)


def add_args(p: argparse.ArgumentParser) -> None:
    LoadConfig.add_args(p)
    add_config_args(p, TokenwiseConfig)
    add_out_arg(p, "runs/<model>")


def run_command(args: argparse.Namespace) -> int:
    from ..data import load_text
    from ..runner.distributed import run_command as run
    from ..runner.identity import run_identity
    from .analysis import ANALYSIS, LOG, TokenwiseResult

    def say_where(model, cfg, out) -> None:  # the Ctrl-C line names the pool and the fits' log
        pools = out / cfg.pool_name(run_identity(model).key, "*")
        args.record.rerun = f"The state pool is in {pools}; finished fits are in {out / LOG}. " + args.record.rerun

    res, cfg, out = run(ANALYSIS, args, check=lambda cfg: load_text(cfg.corpus), prepare=say_where)
    if res is None:  # a torchrun rank other than 0: rank 0 writes
        return 0
    g = res.geometry
    n_tokens = int(g["n_tokens"].iloc[0])
    for col, what in (
        ("rel_error", "median ||r|| / ||Delta_full||"),
        ("cos_update", "median cos(Delta_full, Delta_tok)"),
        ("share_angle_above_60", "share of tokens whose residual is > 60 deg from Delta_tok"),
    ):
        print(f"\n{what} ({n_tokens} tokens, k={cfg.k}):")
        print(g.pivot(index="layer", columns="class", values=col).round(3).to_string())
    c = res.correlation[res.correlation["target"] == "kl"]
    print(f"\nSpearman(error, KL at the patched token), {g['patch_tokens'].iloc[0]} tokens (paper: {SPEARMAN_RANGE}):")
    print(c.pivot(index="layer", columns="class", values="spearman").round(3).to_string())
    if int(g["patch_tokens"].iloc[0]) < MIN_PATCHED:
        print(
            f"note: Spearman on {g['patch_tokens'].iloc[0]} patched tokens per layer and class: an indication only "
            f"(below {MIN_PATCHED}; raise --patch-tokens)"
        )
    print_written(
        [out / TokenwiseResult.table(n).filename for n in ("geometry", "correlation", "tokens")] + [out / LOG]
    )
    return 0


COMMANDS = (Command("tokenwise", HELP, add_args, run_command, DESCRIPTION),)
