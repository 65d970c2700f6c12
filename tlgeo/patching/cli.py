"""``tlgeo patching``: its flags are :class:`~tlgeo.patching.config.PatchingConfig`'s fields."""

from __future__ import annotations

import argparse

import pandas as pd

from ..runner.analysis import Command
from ..runner.cliargs import LoadConfig, add_config_args, add_out_arg, print_written
from .config import PatchingConfig
from .effects import CALIBRATED_PROMPTS

__all__ = ["COMMANDS", "top_effects", "significance_summary", "par_baseline_lines"]

DESCRIPTION = (
    "Build each task's clean and corrupted prompts (IOI, subject-verb agreement from BLiMP, greater-than, "
    "induction), check that the model does the task, and patch every head's whole output, the parts of "
    "its write along and orthogonal to the residual it updates, its self message and non-self aggregate "
    "(split along v_t), and every MLP's output and parts: exactly, and by attribution. Effects are the "
    "share of the clean-corrupted metric gap a patch moves, with Fieller's interval over prompts, the "
    "t-test's p (the interval excludes 0 exactly when p < 0.05) and a Benjamini-Hochberg q-value within "
    "each task, method and direction; the share of each head's "
    "write along the residual is compared with a randomly rotated write's. Resumes from its log."
)


def add_args(p: argparse.ArgumentParser) -> None:
    LoadConfig.add_args(p)
    add_config_args(p, PatchingConfig)
    add_out_arg(p, "runs/<model>")


def top_effects(effects: pd.DataFrame, k: int = 5) -> pd.DataFrame:
    """The ``k`` largest effects by size per (task, method, direction, component)."""
    key = ["task", "method", "direction", "component"]
    df = effects.assign(size=effects["effect"].abs()).sort_values("size", ascending=False)
    return (
        df.groupby(key, sort=False)
        .head(k)
        .sort_values([*key, "size"], ascending=[True] * 4 + [False])
        .drop(columns="size")
    )


def significance_summary(effects: pd.DataFrame) -> pd.DataFrame:
    """Per (task, method, direction): the rows, those with ``significant`` (BH ``q < 0.05`` within the
    family) and the smallest ``q``."""
    key = ["task", "method", "direction"]
    df = effects.assign(sig=effects["significant"].eq(True))  # read from a CSV with older rows: True, False or NaN
    return (
        df.groupby(key, sort=True).agg(rows=("q", "size"), significant=("sig", "sum"), min_q=("q", "min")).reset_index()
    )


def par_baseline_lines(baseline: pd.DataFrame) -> list[str]:
    """One line per task: the median over heads of ``par_share``, ``par_share_rotated`` and ``1 / d_model``."""
    out = []
    for task, g in baseline.groupby("task", sort=True):
        out.append(
            f"  {task}: median over {len(g)} heads of the share of a head's write along the residual "
            f"{g['par_share'].median():.4f} (range {g['par_share'].min():.4f} to {g['par_share'].max():.4f}); "
            f"randomly rotated write {g['par_share_rotated'].median():.4f}; "
            f"1/d_model {g['par_share_expected'].iloc[0]:.4f}"
        )
    return out


def _say(model, cfg, out) -> None:
    """Print what the run will patch (before it starts)."""
    print(
        f"patching {', '.join(cfg.task_names())}: {cfg.prompts} prompts per task, {' and '.join(cfg.methods)}, "
        f"{' and '.join(cfg.directions)}, positions {cfg.positions}, reference of the patched parts: "
        f"{cfg.frame} run"
    )


def _print_effects(res) -> None:
    """Print the largest effects, the significant rows, attribution vs exact and the splits' interactions."""
    show = ["task", "method", "direction", "component", "layer", "head", "effect", "ci_low", "ci_high", "p", "q"]
    fam = int(res.effects["family_size"].max()) if "family_size" in res.effects else len(res.effects)
    print(
        "\nlargest effects (share of the clean - corrupted gap; head -1: the MLP; 95 % interval over prompts, "
        "excluding 0 exactly when p < 0.05; q: Benjamini-Hochberg over the family, every component, layer "
        f"and head patched for one task, method and direction: up to {fam} tests):"
    )
    print(top_effects(res.effects, 3)[show].to_string(index=False, float_format="{:.3g}".format))
    print(
        "\nrows with q < 0.05 (Benjamini-Hochberg over every component, layer and head of a task, method "
        "and direction; p: t-test of the per-prompt numerators):"
    )
    print(significance_summary(res.effects).to_string(index=False, float_format="{:.3g}".format))
    agree = res.agreement
    if agree is not None:
        print("\nattribution vs exact (over blocks and heads):")
        print(
            agree[
                ["task", "direction", "component", "pairs", "pearson", "spearman", "max_abs_diff", "worst_layer"]
            ].to_string(index=False, float_format="{:.3f}".format)
        )
    inter = res.interactions
    if inter is not None:
        big = inter.assign(size=inter["interaction"].abs()).sort_values("size", ascending=False)
        print("\nexact effects of a split's parts vs the whole (the changes add up; effects only to first order):")
        print(
            big.groupby(["task", "split"])
            .agg(
                cells=("interaction", "size"),
                mean_abs_interaction=("size", "mean"),
                max_abs_interaction=("size", "max"),
            )
            .to_string(float_format="{:.3f}".format)
        )


def _print_paths(paths: pd.DataFrame) -> None:
    """Print the largest paths, eight per task, direction and component."""
    show = [
        "task",
        "direction",
        "component",
        "sender_layer",
        "sender_head",
        "receiver_layer",
        "receiver_head",
        "receiver_input",
        "effect",
        "ci_low",
        "ci_high",
        "p",
        "q",
    ]
    big = paths.assign(size=paths["effect"].abs()).sort_values("size", ascending=False)
    print(
        f"\nlargest paths (a sender's change let through only to the receiver's input; of {len(paths)}, "
        f"{int(paths['significant'].eq(True).sum())} with q < 0.05; q: Benjamini-Hochberg over every path "
        "of one task, component and direction):"
    )
    big = big.groupby(["task", "direction", "component"], sort=False).head(8)
    big = big.sort_values(["task", "direction", "component", "size"], ascending=[True] * 3 + [False])
    print(big[show].to_string(index=False, float_format="{:.3g}".format))


def _warn_few_prompts(cfg: PatchingConfig) -> None:
    """Warn when the prompts per task are below those from which the intervals' coverage was measured."""
    below = {m: CALIBRATED_PROMPTS[m] for m in cfg.methods if cfg.prompts < CALIBRATED_PROMPTS.get(m, 0)}
    if below:
        print(
            f"\nwarning: {cfg.prompts} prompts per task is below the prompt counts from which the 95 % intervals "
            f"were measured to cover at least 93 % ({', '.join(f'{m} {n}' for m, n in below.items())}; "
            "docs/statistics.md): an indication only"
        )


def run_command(args: argparse.Namespace) -> int:
    from ..runner.distributed import run_command as run
    from .analysis import ANALYSIS, PatchingResult

    res, cfg, out = run(ANALYSIS, args, prepare=_say)
    if res is None:  # a torchrun rank other than 0: rank 0 writes
        return 0
    cols = ["task", "n", "accuracy", "clean_metric", "corrupted_metric", "patched", "reason"]
    print("\ntasks (accuracy: share of clean prompts answered right):")
    print(res.tasks[[c for c in cols if c in res.tasks.columns]].to_string(index=False, float_format="{:.3f}".format))
    files = [out / PatchingResult.table(n).filename for n in res.tables()]
    if res.effects is not None and len(res.effects):
        _print_effects(res)
    if res.paths is not None and len(res.paths):
        _print_paths(res.paths)
        files.append(out / "patching_paths.jsonl")
    if res.par_baseline is not None and len(res.par_baseline):
        print(
            "\nhead_par control (clean run, every prompt and position; a head_par effect near 0 means little "
            "where the share is near chance):"
        )
        print("\n".join(par_baseline_lines(res.par_baseline)))
    _warn_few_prompts(cfg)
    print_written(files + [out / "patching.jsonl"])
    return 0


COMMANDS = (
    Command(
        "patching",
        "geometry-resolved activation patching: which heads' parallel, perpendicular, self "
        "and non-self writes carry a behaviour",
        add_args,
        run_command,
        DESCRIPTION,
    ),
)
