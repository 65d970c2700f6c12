"""The patching step of ``tlgeo atlas``.

``patching``: IOI on a few prompts; attribution patching of the whole head, its write along and
orthogonal to the residual and the MLP, exact patching of the whole head at every block (which
also checks the attribution), denoising at all positions; with ``--patching-path-senders`` and
``--patching-path-receivers`` also path patching between them. ``tlgeo patching`` runs every
component exactly, more tasks and noising.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..runner.analysis import Headline, StepContext, atlas_budgets, register_analysis_step, register_chapter
from .analysis import ANALYSIS, PatchingResult
from .config import PatchingConfig

__all__ = ["CHAPTER", "PatchingBudgets", "headline", "bh_sentence"]

CHAPTER = "patching"
SMALL = 16  # prompts below which an effect is an indication only

PatchingBudgets = atlas_budgets(
    PatchingConfig,
    "patching_",
    ("tasks", "prompts", "components", "exact_components", "min_accuracy", "path_senders", "path_receivers"),
)


def atlas_config(b: PatchingBudgets) -> PatchingConfig:
    """The step's config: exact and attribution patching, and path patching where senders and receivers are given."""
    if b.patching_path_senders and b.patching_path_receivers:
        return b.config(methods=("exact", "attribution", "paths"))
    return b.config()


def _top(effects: pd.DataFrame, task: str, component: str, method: str) -> pd.Series | None:
    d = effects[(effects["task"] == task) & (effects["component"] == component) & (effects["method"] == method)]
    return None if d.empty else d.loc[d["effect"].abs().idxmax()]


def _cell(effects: pd.DataFrame, row: pd.Series, component: str) -> float | None:
    d = effects[
        (effects["task"] == row["task"])
        & (effects["component"] == component)
        & (effects["layer"] == row["layer"])
        & (effects["head"] == row["head"])
        & (effects["method"] == "attribution")
    ]
    return None if d.empty else float(d["effect"].iloc[0])


def bh_sentence(effects: pd.DataFrame, task: str) -> str:
    """`` N of M rows ... have q < 0.05 ...`` per method for ``task`` ("" for a table without ``q``)."""
    d = effects[effects["task"] == task]
    if "significant" not in d.columns or d.empty:
        return ""
    parts = [f"{int(g['significant'].eq(True).sum())} of {len(g)} {m}" for m, g in d.groupby("method", sort=True)]
    return f" Rows with q < 0.05 after Benjamini-Hochberg over every component, layer and head: {', '.join(parts)}."


def headline(out: Path, budgets: PatchingBudgets | None = None) -> Headline:
    """Per patched task: the head with the largest effect, and how its attribution splits between the
    parts of its write along and orthogonal to the residual."""
    tasks_csv, effects_csv = Path(out) / "patching_tasks.csv", Path(out) / "patching_effects.csv"
    if not (tasks_csv.exists() and effects_csv.exists()):
        return Headline()
    tasks, effects = pd.read_csv(tasks_csv), pd.read_csv(effects_csv)
    sentences, warnings = [], []
    for _, t in tasks.iterrows():
        if not t["patched"]:
            sentences.append(f"Patching: {t['task']} not patched ({t['reason']}).")
            continue
        method = "exact" if ((effects["task"] == t["task"]) & (effects["method"] == "exact")).any() else "attribution"
        top = _top(effects, t["task"], "head", method)
        if top is None:
            continue
        par, perp = _cell(effects, top, "head_par"), _cell(effects, top, "head_perp")
        split = (
            ""
            if par is None or perp is None
            else (
                f"; by attribution, its write along the residual it updates carries {par:.2f} and the part "
                f"orthogonal to it {perp:.2f}"
            )
        )
        sentences.append(
            f"Patching ({t['task']}, clean accuracy {t['accuracy']:.2f}): head L{int(top['layer'])}H{int(top['head'])} "
            f"restores {top['effect']:.2f} of the clean - corrupted gap ({method}, CI {top['ci_low']:.2f} to "
            f"{top['ci_high']:.2f}){split}."
        )
        if int(t["n"]) < SMALL:
            warnings.append(f"Patching: {int(t['n'])} {t['task']} prompts: indication only.")
        paths_csv = Path(out) / "patching_paths.csv"
        if paths_csv.exists():
            paths = pd.read_csv(paths_csv)
            paths = paths[(paths["task"] == t["task"]) & (paths["component"] == "head")]
            if len(paths):
                p = paths.loc[paths["effect"].abs().idxmax()]
                to = (
                    "the logits"
                    if p["receiver_input"] == "logits"
                    else f"L{int(p['receiver_layer'])}H{int(p['receiver_head'])}'s {p['receiver_input']}"
                )
                sentences.append(
                    f"Path patching ({t['task']}): of {len(paths)} paths the largest is "
                    f"L{int(p['sender_layer'])}H{int(p['sender_head'])} into {to}, {p['effect']:.2f} of "
                    f"the gap (q {p['q']:.2g})."
                )
    return Headline(sentences, warnings)


register_chapter(CHAPTER, PatchingBudgets, headline=headline, title="Geometry-resolved activation patching")


@register_analysis_step(
    "patching",
    CHAPTER,
    ANALYSIS,
    atlas_config,
    "geometry-resolved activation patching: IOI, heads' parallel and perpendicular writes",
)
def _section(ctx: StepContext, result: PatchingResult) -> None:
    cfg, tasks, effects = ctx.config, result.tasks, result.effects
    small = " Indication only at this budget." if cfg.prompts < SMALL else ""
    ctx.report.section(
        "Geometry-resolved activation patching",
        f"Clean and corrupted prompts of {', '.join(cfg.task_names())} ({cfg.prompts} per task; IOI: the "
        "corrupted prompt "
        "names three other people, so neither answer is favoured). Each component of each head and MLP is copied "
        "from the clean run into the corrupted one (denoising, all positions); its effect is the share of the "
        "clean - corrupted metric gap it restores. head_par / head_perp: the part of the head's write along / "
        "orthogonal to the residual it writes into, taken against the patched run's residual. Attribution "
        "patching estimates every component to first order from one forward and backward; exact patching of "
        f"{', '.join(cfg.exact_set())} checks it." + small,
    )
    cols = [
        c
        for c in ("task", "n", "accuracy", "clean_metric", "corrupted_metric", "patched", "reason", "note")
        if c in tasks.columns and (c not in ("reason", "note") or tasks[c].fillna("").astype(str).str.len().any())
    ]
    ctx.report.table(
        tasks[cols],
        "Does the model do the task? accuracy: share of clean prompts with the right answer "
        "ahead (metric > 0); a task below min_accuracy is not patched.",
    )
    paths = result.paths
    if paths is not None and len(paths):
        _paths_section(ctx, paths)
    if effects is None or effects.empty:
        return
    for task in effects["task"].unique():
        _task_section(ctx, result, task)


def _paths_section(ctx: StepContext, paths: pd.DataFrame) -> None:
    """Add each task and direction's path-patching figure and its eight largest paths to the report."""
    from .plots import plot_paths

    for (task, direction), g in paths.groupby(["task", "direction"], sort=False):
        ctx.report.figure(
            plot_paths(g, task, direction=direction),
            f"{task}: path patching, {direction}: each sender's change let through only to one "
            "receiver's query, key or value input (or the logits), attention in between frozen "
            "at the patched run's, MLPs recomputed (Wang et al.); dot: q < 0.05 over every path.",
        )
        big = g.assign(size=g["effect"].abs()).nlargest(8, "size")
        ctx.report.table(
            big[
                [
                    "component",
                    "sender_layer",
                    "sender_head",
                    "receiver_layer",
                    "receiver_head",
                    "receiver_input",
                    "effect",
                    "ci_low",
                    "ci_high",
                    "q",
                ]
            ],
            f"{task}: the eight largest paths by size (receiver_head -1: the logits).",
        )


def _task_section(ctx: StepContext, result: PatchingResult, task: str) -> None:
    """Add one task's effect figures, agreement, largest head effects and attention view to the report."""
    from .plots import plot_attribution_vs_exact, plot_effects, top_heads_view_of

    effects = result.effects
    methods = set(effects.loc[effects["task"] == task, "method"])
    ctx.report.figure(
        plot_effects(effects, task, method="attribution"),
        f"{task}: attribution effects per layer and head, one panel per component; right: the MLP "
        "per layer (band: bootstrap CI over prompts).",
    )
    if "exact" in methods:
        ctx.report.figure(
            plot_attribution_vs_exact(effects, task),
            f"{task}: attribution (y) against exact (x) effect per layer and head; points off the "
            "diagonal are where the linear approximation fails.",
        )
    if result.agreement is not None and (result.agreement["task"] == task).any():
        agree = result.agreement[result.agreement["task"] == task]
        ctx.report.table(
            agree[["component", "pairs", "pearson", "spearman", "max_abs_diff", "worst_layer", "worst_head"]],
            f"{task}: attribution vs exact patching over every layer and head.",
        )
    top = effects[(effects["task"] == task) & (effects["head"] >= 0)]
    top = top.assign(size=top["effect"].abs()).nlargest(8, "size").drop(columns="size")
    ctx.report.table(
        top[
            [
                c
                for c in ("method", "component", "layer", "head", "effect", "ci_low", "ci_high", "q")
                if c in top.columns
            ]
        ],
        f"{task}: the eight largest head effects by size, either method; effect = share of the "
        "clean - corrupted gap restored, CI over prompts." + bh_sentence(effects, task),
    )
    method = "exact" if "exact" in methods else "attribution"
    views = result.attention
    if views is not None and (views["task"] == task).any():
        direction = "denoise" if (effects["direction"] == "denoise").any() else str(effects["direction"].iloc[0])
        ctx.report.circuitsvis(
            top_heads_view_of(views[views["task"] == task], effects, task, method=method, direction=direction),
            f"{task}: clean attention of the heads with the largest {method} effect (whole "
            f"head, {direction}), on the first prompt; each named with its effect.",
        )
