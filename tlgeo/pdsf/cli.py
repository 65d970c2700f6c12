"""``tlgeo pdsf``: its flags are :class:`~tlgeo.pdsf.config.PDSFConfig`'s fields."""

from __future__ import annotations

import argparse

from ..runner.analysis import Command
from ..runner.cliargs import LoadConfig, add_config_args, add_out_arg, model_key, print_written
from .config import PDSFConfig
from .paper import divergence_text, single_pass_text

__all__ = ["COMMANDS"]

HELP = "prediction-anchored subspaces: P, D, S, F of the residual stream (seed paper 001)"
DESCRIPTION = (
    "Split each prompt's last-token state into its prediction direction P (unembedding of the argmax "
    "token), PCA subspaces D and S around it and the complement F, at every layer of a prompt set "
    "(the paper's SpecA by default): ranks, energies, participation ratios, manifold complexity, group "
    "discrimination; single-pass edits of D, S and F at the last prompt token (KL, the angle left at "
    "later layers); then rotate D, S, the top of F, its dynamic part or a random subspace persistently "
    "while generating SpecB continuations, measure when they diverge, and split F along the unedited "
    "continuations into its static and dynamic parts. Every stage resumes from its log in --out: rerun "
    "the same command after an interruption."
)
LAYER_COLUMNS = [
    "layer",
    "k_D",
    "k_S",
    "pr_D",
    "pr_S",
    "interface_dim",
    "energy_P",
    "energy_D",
    "energy_S",
    "energy_F",
    "angle_u_top_axis",
]
SINGLE_PASS_COLUMNS = [
    "condition",
    "rank",
    "n_prompts",
    "kl_mean",
    "kl_sem",
    "kl_median",
    "flip_pct",
    "angle_at_edit",
    "angle_final",
]


def add_args(p: argparse.ArgumentParser) -> None:
    LoadConfig.add_args(p)
    add_config_args(p, PDSFConfig)
    add_out_arg(p, "runs/pdsf-<model>")


def _printer(cfg: PDSFConfig):
    """``on_table`` of :func:`tlgeo.pdsf.analysis.run`: the tables the command prints, as before."""

    def show(name: str, df) -> None:
        if name == "layers":
            print(df[LAYER_COLUMNS].round(3).to_string(index=False))
        elif name == "single_pass_summary":
            print(
                f"\nsingle-pass edits at state {int(df['layer'].iloc[0])} of the last prompt token (paper, KL "
                f"nats: {single_pass_text()}):"
            )
            print(df[SINGLE_PASS_COLUMNS].round(4).to_string(index=False))
        elif name == "generation_summary":
            print(
                f"\npersistent rotations at state {int(df['layer'].iloc[0])} on {int(df['n_prompts'].iloc[0])} "
                f"{cfg.generate} prompts, {cfg.new_tokens} tokens (paper: {divergence_text()}):"
            )
            print(df.drop(columns=["model"]).round(3).to_string(index=False))
        elif name == "dynamics":
            print(
                "\nF along the unedited continuations: static share (of mean ||F_t||²), F's share of the state, PR "
                "of the dynamic part:"
            )
            print(df[["layer", "static_share", "f_share_of_state", "dynamic_pr"]].round(3).to_string(index=False))

    return show


def run_command(args: argparse.Namespace) -> int:
    from ..runner.distributed import run_command as run
    from .analysis import ANALYSIS, LOGS, PDSFResult

    res, cfg, out = run(
        ANALYSIS,
        args,
        out_name="pdsf-" + model_key(args.model),
        prepare=lambda model, cfg, out: cfg.check(model),
        show=_printer,
    )
    if res is None:  # a torchrun rank other than 0: rank 0 writes
        return 0
    stages = [s for s, names in PDSFResult.STAGE_TABLES.items() if any(n in res.tables() for n in names)]
    print_written([out / PDSFResult.table(n).filename for n in res.tables()] + [out / LOGS[s] for s in stages])
    return 0


COMMANDS = (Command("pdsf", HELP, add_args, run_command, DESCRIPTION),)
