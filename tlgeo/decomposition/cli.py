"""``tlgeo decompose | profile | ppl`` and the paper's other experiments (``tlgeo sweeps | compare | heads |
mlp-carrier | closed-form | audit``): each command's flags are the fields of its config
(:mod:`.config`)."""

from __future__ import annotations

import argparse
import time
from typing import Sequence

from ..runner.analysis import Command
from ..runner.cliargs import LoadConfig, add_config_args, add_out_arg, print_written
from ..models import Model
from .config import (
    AuditConfig,
    ClosedFormConfig,
    CompareConfig,
    DecompositionConfig,
    HeadsConfig,
    MlpCarrierConfig,
    PplConfig,
    ProfileConfig,
    SweepsConfig,
)

__all__ = ["COMMANDS", "edited_blocks"]

EDIT_HELP = "Edits leave the first --skip-first blocks unedited (default 1, as the reference code)"
RUN_DESCRIPTION = (
    "Profile the parallel ratio per layer and site, then measure perplexity with the parallel "
    "(s_par=0) or perpendicular (s_perp=0) part removed at every site. " + EDIT_HELP + "."
)
PPL_DESCRIPTION = "Perplexity unedited and under one edit. " + EDIT_HELP + "; --layers and --heads narrow them further."


def _adder(cls: type):
    def add(p: argparse.ArgumentParser) -> None:
        LoadConfig.add_args(p)
        add_config_args(p, cls)
        add_out_arg(p, "runs/<model>")

    return add


def edited_blocks(
    model: Model, skip_first: int, layers: Sequence[int] | None = None, heads: Sequence[int] | None = None
) -> str:
    """``blocks 1..2 of 0..2, all heads``: the blocks (and heads) an edit touches."""
    from ..hooks.adapter import resolve_layers

    chosen = list(resolve_layers(model.cfg, layers, skip_first))
    spans, start = [], chosen[0]
    for a, b in zip(chosen, chosen[1:] + [None]):
        if b != a + 1:
            spans.append(f"{start}" if start == a else f"{start}..{a}")
            start = b
    text = f"blocks {','.join(spans)} of 0..{model.cfg.n_layers - 1}"
    return text + (f", heads {','.join(map(str, heads))}" if heads else ", all heads")


def _check(args: argparse.Namespace):
    """What fails before the model loads: the corpus (the edited layers and heads of ``ppl`` too, from the model's
    config: :meth:`PplConfig.check_shape`, called for every command)."""

    def check(cfg) -> None:
        from ..data import load_text

        load_text(cfg.corpus)

    return check


def _fit(model: Model, cfg):
    """Window lengths left at their default follow the model's context (a note each); given ones that do not fit,
    and sites the model's family refuses, fail."""
    cfg, notes = cfg.fit_to(model.cfg.n_ctx)
    for note in notes:
        print(note)
    cfg.check_fits(model)
    return cfg


def _run(analysis, args: argparse.Namespace, *, rerun: str = "", say=None, show=None):
    """:func:`~tlgeo.runner.distributed.run_command` for a decomposition command: ``(result, cfg, out)``. ``rerun``
    (formatted with ``out``) goes first in the Ctrl-C line; ``say(model, cfg)`` prints what the run edits."""
    from ..runner.distributed import run_command as run

    def prepare(model, cfg, out):
        cfg = _fit(model, cfg)
        if rerun:
            args.record.rerun = f"{rerun.format(out=out)} {args.record.rerun}"
        if say is not None:
            say(model, cfg)
        return cfg

    return run(analysis, args, check=_check(args), prepare=prepare, show=show)


def _print_profile(summary) -> None:
    table = summary.pivot(index="layer", columns="site", values="parallel_ratio_median")
    print("\nmedian parallel ratio |alpha| ||r|| / ||y_perp|| per layer (position 0 left out):")
    print(table.round(3).to_string())


def run_command(args: argparse.Namespace) -> int:
    from .analysis import ANALYSIS

    t0, blocks = time.time(), []

    def say(model, cfg):
        blocks.append(edited_blocks(model, cfg.skip_first))
        print(f"edits in {blocks[0]}")

    def show(cfg):
        def table(name, df):
            if name == "profile_summary":
                _print_profile(df)
                return
            cols = ["site", "s_par", "s_perp", "ppl", "delta_ppl", "word_ppl", "n_tokens"]
            print(
                f"\nperplexity on {cfg.corpus} ({int(df['n_tokens'].iloc[0])} tokens, context {cfg.context}), "
                f"edits in {blocks[0]}:"
            )
            print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}"))

        return table

    res, _, out = _run(ANALYSIS, args, rerun="Finished edits are in {out}/edits.jsonl.", say=say, show=show)
    if res is None:
        return 0  # a torchrun rank other than 0: rank 0 writes
    print_written([out / "profile_summary.csv", out / "edits.csv", out / "edits.jsonl"])
    print(f"({time.time() - t0:.0f} s; rows of other settings in these files are kept)")
    return 0


def profile_command(args: argparse.Namespace) -> int:
    from .analysis import PROFILE

    res, cfg, out = _run(PROFILE, args, show=lambda cfg: lambda name, df: _print_profile(df))
    if res is None:
        return 0
    print_written([out / "profile_summary.csv"] + ([out / cfg.per_token_file()] if cfg.per_token else []))
    return 0


def ppl_command(args: argparse.Namespace) -> int:
    from .analysis import PPL

    def say(model, cfg):
        e = cfg.edit()
        e.hooks(model)  # layers and heads that do not fit the model fail before any long work
        print(
            f"{e.site.name}: s_par={cfg.s_par:g}, s_perp={cfg.s_perp:g} in "
            f"{edited_blocks(model, cfg.skip_first, cfg.layers, cfg.heads)}"
        )

    def show(cfg):
        def table(name, df):
            for r in df.to_dict(orient="records"):
                print(
                    f"{r['site']:>16} s_par={r['s_par']} s_perp={r['s_perp']}: ppl {r['ppl']:.3f} "
                    f"(delta {r['delta_ppl']:+.3f})"
                )

        return table

    res, _, out = _run(PPL, args, rerun="Finished runs are in {out}/ppl.jsonl.", say=say, show=show)
    if res is None:
        return 0
    print_written([out / "ppl.csv", out / "ppl.jsonl"])
    return 0


def _show_table(name: str, df) -> None:
    """A result table on the terminal: its columns but the identity and the settings every row shares."""
    from ..runner.results import IDENTITY

    same = [c for c in df.columns if c in IDENTITY or (len(df) > 1 and df[c].astype(str).nunique() == 1)]
    shown = df.drop(columns=same)
    print(f"\n{name} ({len(df)} rows):")
    print(shown.head(40).to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if len(df) > 40:
        print(f"... {len(df) - 40} more rows in the CSV")


def _experiment_command(name: str):
    """``tlgeo <name>``: the registered analysis ``name`` with its config from the flags."""

    def command(args: argparse.Namespace) -> int:
        from ..runner.analysis import analyses

        a = analyses()[name]
        big = {t.name for t in a.result.TABLES if t.filename.endswith(".gz")}  # per-token rows: in the file only
        shown = lambda table, df: None if table in big else _show_table(table, df)  # noqa: E731
        res, _, out = _run(a, args, rerun="Finished parts are in {out}/*.jsonl.", show=lambda cfg: shown)
        if res is None:
            return 0  # a torchrun rank other than 0: rank 0 writes
        print_written([out / t.filename for t in a.result.TABLES if (out / t.filename).exists()])
        return 0

    return command


EXPERIMENTS = (  # command, analysis, config, help (the paper's figure or table)
    ("sweeps", "sweeps", SweepsConfig, "perplexity over the s_par and s_perp grids at every site (Figure 3)"),
    ("compare", "compare", CompareConfig, "parallel removals compared: perplexity, zero-shot, RULER (Tables 1, 2, 8)"),
    ("heads", "heads", HeadsConfig, "per-head alpha map and single-head sensitivity (Figure 7)"),
    ("mlp-carrier", "mlp_carrier", MlpCarrierConfig, "MLP carrier: No-Para vs No-Perp loss change (Table 10)"),
    ("closed-form", "closed_form", ClosedFormConfig, "the diagonal closed form against the value-space edit (Table 5)"),
    ("audit", "audit", AuditConfig, "post-W_O perturbation, energy and retained norm of a removal (Table 6)"),
)

COMMANDS = (
    Command(
        "decompose",
        "main job: parallel-ratio profile + perplexity under component removal at every site",
        _adder(DecompositionConfig),
        run_command,
        RUN_DESCRIPTION,
    ),
    Command("profile", "parallel ratios per layer, site and token", _adder(ProfileConfig), profile_command),
    Command("ppl", "perplexity unedited and under one edit", _adder(PplConfig), ppl_command, PPL_DESCRIPTION),
    *(
        Command(
            command,
            help,
            _adder(cls),
            _experiment_command(name),
            " ".join((cls.__doc__ or "").replace("``", "").split()) + " " + EDIT_HELP + ".",
        )
        for command, name, cls, help in EXPERIMENTS
    ),
)
