"""Command line of the pretraining run (``tlgeo train``, ``scripts/pretrain.py``): the flags of
:class:`~tlgeo.train.config.ModelSpec` and :class:`~tlgeo.train.config.TrainConfig`, generated from
their fields, and ``--resume``."""

from __future__ import annotations

import argparse
import dataclasses

from ..runner.cliargs import Formatter, add_config_args, config_argv, config_from_args
from .config import ModelSpec, TrainConfig, warmup_for

__all__ = ["add_train_args", "train_config", "train_argv", "main"]


def add_train_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    add_config_args(p, ModelSpec)
    add_config_args(p, TrainConfig)
    p.add_argument("--resume", action="store_true", help="continue from <out>/checkpoint.pt")
    return p


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The :class:`TrainConfig` of the parsed flags of :func:`add_train_args` (a bad value raises
    :class:`~tlgeo.train.config.ConfigError` naming it, before any work)."""
    return config_from_args(TrainConfig, args, model=config_from_args(ModelSpec, args))


def train_argv(cfg: TrainConfig) -> list[str]:
    """The flags of ``tlgeo train`` that make ``cfg`` (each one whose value is not its default; ``--warmup``
    where it is not the one ``--steps`` gives)."""
    argv = config_argv(dataclasses.replace(cfg, model=ModelSpec()))
    if cfg.warmup == warmup_for(cfg.steps):
        i = argv.index("--warmup")
        del argv[i : i + 2]
    return config_argv(cfg.model) + argv


def run(args: argparse.Namespace) -> int:
    from .loop import train

    cfg = train_config(args)
    df = train(cfg, resume=args.resume)
    last = df.dropna(subset=["val_loss"]).tail(1)
    if len(last):
        print(
            f"final val loss {float(last.val_loss.iloc[0]):.4f} at step {int(last.step.iloc[0])}; "
            f"model in {cfg.out}/model"
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    p = add_train_args(argparse.ArgumentParser(description=DESCRIPTION, formatter_class=Formatter))
    return run(p.parse_args(argv))


DESCRIPTION = "Pretrain a causal LM from scratch with parallel suppression (torchrun-ready)"


def _run_command(args: argparse.Namespace) -> int:
    args.record.out = args.out
    args.record.rerun = "Rerun it with --resume to continue from the last checkpoint."
    return run(args)


def _commands():
    from ..runner.analysis import Command

    return (
        Command(
            "train",
            "pretrain a model from scratch with parallel suppression",
            add_train_args,
            _run_command,
            DESCRIPTION,
        ),
    )


COMMANDS = _commands()
