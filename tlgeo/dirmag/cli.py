"""``tlgeo dirmag``: its flags are :class:`~tlgeo.dirmag.config.DirmagConfig`'s fields."""

from __future__ import annotations

import argparse

from ..runner.analysis import Command
from ..runner.cliargs import LoadConfig, add_config_args, add_out_arg, print_written
from .config import DirmagConfig
from .paper import FULL_SENTENCES, MODEL, PAPER_ENTROPY, PAPER_PROBES, PAPER_RECOVERY

__all__ = ["COMMANDS"]

DESCRIPTION = (
    "Move every token state of the middle third of the blocks by delta, along its direction (magnitude) "
    "or by turning it (angle), and measure the loss damage on the notebook's WikiText sentences, per "
    "delta and seed (42 + i); optionally BLiMP agreement, causal repair and attention entropy under the "
    "same perturbations, and probes of the direction vs the norm. Resumes from its logs."
)
SMALL = 32  # below this many sentences or pairs a table is an indication only


def add_args(p: argparse.ArgumentParser) -> None:
    LoadConfig.add_args(p)
    add_config_args(p, DirmagConfig)
    add_out_arg(p, "runs/<model>")


def _titles(cfg: DirmagConfig) -> dict:
    def few(n: int) -> str:
        return f" — {n} only: indication only" if n < SMALL else ""

    rec = PAPER_RECOVERY
    return {
        "damage": lambda df: (
            f"loss damage (perturbed - clean {df['clean_loss'].iloc[0]:.3f}), mean over {cfg.seeds} "
            f"seed(s); median state norm {df['median_norm'].iloc[0]:.1f}; each row's delta / median "
            f"norm is in the damage CSV; paper: {MODEL}"
            + few(int(df["n_sentences"].iloc[0]))
            * (int(df["n_sentences"].iloc[0]) < FULL_SENTENCES)
        ),
        "blimp": lambda df: (
            f"BLiMP agreement accuracy (%, pooled over 6 paradigms x {cfg.blimp_pairs} pairs; clean "
            f"{df.loc[df['paradigm'] == 'pooled', 'clean_accuracy'].iloc[0]:.1f})" + few(6 * cfg.blimp_pairs)
        ),
        "repair": lambda df: (
            f"recovery (%, {cfg.repair_sentences} sentences; paper at delta 5: attention "
            f"{rec[('attn', 'angle')]} angle / {rec[('attn', 'magnitude')]} magnitude, norms "
            f"{rec[('norm', 'angle')]} angle / {rec[('norm', 'magnitude')]} magnitude)" + few(cfg.repair_sentences)
        ),
        "entropy": lambda df: (
            f"attention entropy shift (nats, perturbed - clean {df['clean_entropy'].iloc[0]:.3f}, "
            "mean over all layers, heads and positions; paper at delta 5: clean "
            f"{PAPER_ENTROPY['clean']}, angle +{PAPER_ENTROPY['angle']}, magnitude "
            f"+{PAPER_ENTROPY['magnitude']})" + few(cfg.entropy_sentences)
        ),
        "probes": lambda df: (
            f"probes (UPOS accuracy %, majority {df.loc[df.task == 'upos', 'baseline'].iloc[0]:.1f}; "
            "depth R² x 100; trained on UD EWT dev, scored on test; paper: POS "
            f"{PAPER_PROBES[('upos', 'direction')]} direction / {PAPER_PROBES[('upos', 'magnitude')]} "
            "magnitude)" + few(cfg.probe_sentences)
        ),
    }


def _summary(name: str, df):
    from .damage import damage_table

    by_kind = lambda d, col: d.groupby(["delta", "kind"])[col].agg(["mean", "std"]).unstack("kind")  # noqa: E731
    if name == "damage":
        return damage_table(df).set_index("delta")
    if name == "blimp":
        return by_kind(df[df["paradigm"] == "pooled"], "accuracy")
    if name == "repair":
        return df.groupby(["delta", "repair", "kind"])["recovery"].agg(["mean", "std"]).unstack("kind")
    if name == "entropy":
        return by_kind(df, "shift")
    return df.pivot_table(index="layer", columns=["task", "features"], values="score")


def run_command(args: argparse.Namespace) -> int:
    from ..runner.distributed import run_command as run
    from .analysis import ANALYSIS, DirmagResult, probe_layers, sentences_of

    sentences = []

    def check(cfg) -> None:  # the sentences exist before the model loads
        sentences.extend(sentences_of(cfg))

    def prepare(model, cfg, out) -> None:
        layers = cfg.grid().chosen_layers(model.cfg)
        if "probes" in cfg.parts():
            probe_layers(model, cfg)
        print(
            f"perturbing blocks.L.hook_resid_post in blocks {','.join(map(str, layers))} of "
            f"0..{model.cfg.n_layers - 1}; {len(sentences)} sentences"
        )

    def show(cfg):
        titles = _titles(cfg)

        def on_table(name, df):
            if name not in titles:  # the summary under torchrun's merge: the damage table shows it
                return
            print(f"\n{titles[name](df)}:")
            print(_summary(name, df).to_string(float_format=lambda v: f"{v:.4g}"))

        return on_table

    res, cfg, out = run(ANALYSIS, args, check=check, prepare=prepare, show=show)
    if res is None:  # a torchrun rank other than 0: rank 0 writes
        return 0
    files = [out / DirmagResult.table(n).filename for n in res.tables()]
    caveat = small_budget(cfg, len(sentences))
    if caveat:
        print(f"\n{caveat}")
    print_written(files + [out / f"dirmag_{n}.jsonl" for n in res.tables()])
    return 0


def small_budget(cfg: DirmagConfig, n_sentences: int) -> str:
    """A line saying which parts ran under the paper notebook's budget (an indication only), or ""."""
    from .paper import FULL_SEEDS, FULL_SENTENCES

    parts = cfg.parts()
    small = [
        f"{what} on {n} sentences"
        for what, n, part in (
            ("damage and BLiMP", n_sentences, "damage"),
            ("repair", cfg.repair_sentences, "repair"),
            ("entropy", cfg.entropy_sentences, "entropy"),
        )
        if part in parts and 0 < n < FULL_SENTENCES
    ]
    if cfg.seeds < FULL_SEEDS:
        small.append(f"{cfg.seeds} seed(s)")
    if not small:
        return ""
    return (
        f"note: {', '.join(small)}: an indication only, not a result (the paper's notebook: {FULL_SENTENCES} "
        f"sentences x {FULL_SEEDS} seeds; recoveries and ratios on a few sentences can lie far outside 0-100 %)"
    )


COMMANDS = (
    Command(
        "dirmag",
        "direction vs magnitude: L2-matched perturbations, syntax, repair, entropy, probes",
        add_args,
        run_command,
        DESCRIPTION,
    ),
)
