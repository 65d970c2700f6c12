"""The directional-decomposition steps of ``tlgeo atlas``, their budgets and headline table.

Steps (each writes its CSVs into the output directory as soon as it is done; a
rerun loads finished steps and resumes unfinished ones from their JSON-lines
logs):

1. ``profile``      parallel ratios per layer and site (Figure 1 analogue)
2. ``sweeps``       ΔPPL over the s_par and s_perp grids at every site (Figure 3)
3. ``compare``      exclude-self vs full vs residual vs diagonal at s_par in {0, 0.5}:
                    perplexity, zero-shot accuracy and RULER-style long context
4. ``heads``        per-head alpha map and causal sensitivity (Figure 7)
5. ``mlp``          MLP carrier: No-Para vs No-Perp Δloss (Table 10)
6. ``closed_form``  the diagonal closed form reproduces the value-space edit (Table 5, Figure 4)
7. ``audit``        post-W_O perturbation / energy / retained norm (Table 6)

Defaults are sized for a 2-core CPU (minutes, not hours); every budget is a flag
of ``tlgeo atlas``, and those that drive the run time carry a ``cost`` (measured
on SmolLM2-135M, 2 threads: ``results/atlas-smollm2-135m/timings.csv``).

The report opens with :func:`tlgeo.decomposition.summary.headline`: a few
sentences of what this model shows next to the paper, computed from the CSVs,
and warnings where a budget is too small to conclude anything (those tables
also say "indication only").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..evals.ruler import evaluate_ruler
from ..evals.zeroshot import evaluate_zeroshot, paired_accuracy_change
from ..hooks.edits import Edit
from ..models import Model
from ..analysis import StepContext, atlas_budgets, budget, register_analysis_step, register_family, register_step
from .analysis import PROFILE, ProfileResult
from ..results import stamp
from .audit import audit_overall, post_wo_audit
from .closed_form import closed_form_check, diag_summary
from .compare import baseline_key, compare_edits
from .config import DecompositionConfig, ProfileConfig
from .heads import head_alpha_map, head_sensitivity
from .mlp_carrier import carrier_table_wide, mlp_carrier_table
from .observe import corpus_batches
from .paper import PAPER, PAPER_PROFILE_MODEL, PAPER_RULER_MODEL, PAPER_SMALL_MODEL, PAPER_ZEROSHOT_MODEL
from .plots import attention_before_after, plot_diagonal, plot_head_maps, plot_profile, plot_sweep
from .summary import (FAMILY, MIN_HEAD_TEXTS, MIN_PPL_TOKENS, MIN_RULER_SAMPLES, MIN_ZEROSHOT_ITEMS, atlas_summary,
                      headline, indication_note, paper_value)
from .sweeps import sensitivity_sweep

__all__ = ["FAMILY", "DecompositionBudgets", "PAPER", "atlas_summary", "headline"]


# The budgets that are fields of the main job's config (same meaning there; the atlas defaults
# are smaller): skip_first, context, profile_tokens. The rest are the atlas's own: the sweep and
# comparison grids, the zero-shot / RULER / heads / MLP / closed-form sizes have no config field
# (the steps that use them are not part of ``tlgeo run``). ``sweep_tokens`` is not ``tokens`` of
# the config either: it sizes every sweep point and comparison condition (its cost says so), and 0
# is not "all" there.
_ConfigBudgets = atlas_budgets(DecompositionConfig, "", ("skip_first", "context", "profile_tokens"))


@dataclass
class DecompositionBudgets(_ConfigBudgets):
    """Budgets of the directional-decomposition steps (tokens, tasks, lengths, resamples);
    ``config()`` gives the :class:`~.config.DecompositionConfig` of ``skip_first``, ``context``
    and ``profile_tokens``."""

    sweep_tokens: int = budget(512, "tokens scored per sweep point and comparison condition", flag="--tokens",
                               cost="~0.18 s per token: sweeps ~0.15 (78 s at 512), compare perplexity ~0.03")
    s_par_grid: tuple[float, ...] = budget((-1.0, 0.0, 0.5, 1.5, 3.0), "s_par values swept", item=float,
                                           cost="~12 s per value at 512 tokens (6 sites x ~2 s)")
    s_perp_grid: tuple[float, ...] = budget((0.0, 0.5, 1.5), "s_perp values swept", item=float,
                                            cost="~10 s per value at 512 tokens (5 sites x ~2 s)")
    compare_sites: tuple[str, ...] = budget(("value_excl_self", "value_full", "attn", "diag"),
                                            "sites compared", item=str,
                                            cost="~8 bare forwards per site at the defaults (zero-shot at "
                                                 "s_par=0, RULER of the ruler sites; the sweep's perplexities)")
    compare_scales: tuple[float, ...] = budget((0.0, 0.5), "s_par values compared", item=float,
                                               cost="~6 bare forwards per value at the defaults (RULER of the "
                                                    "ruler sites; zero-shot of --zeroshot-scales)")
    zeroshot_tasks: tuple[str, ...] = budget(("piqa", "arc_easy", "winogrande"),
                                             "zero-shot tasks (piqa,arc_easy,arc_challenge,openbookqa,winogrande,boolq)",
                                             item=str, cost="~36 s per task at 20 items (9 conditions)")
    zeroshot_scales: tuple[float, ...] = budget((0.0,), "of the compared scales, those whose removals zero-shot "
                                                "scores besides the unedited model (the paper's Table 1: s_par = 0)",
                                                item=float, cost="~20 bare forwards per scale at the defaults (4 sites x 3 tasks)")
    zeroshot_limit: int = budget(20, "first n items of each zero-shot task (below 50: indication only)",
                                 cost="~5.4 s per item at the defaults (3 tasks x 9 conditions x ~0.2 s)")
    ruler_tasks: tuple[str, ...] = budget(("niah_single", "vt"), "RULER-style tasks", item=str,
                                          cost="~27 s per task at 2 samples of 1024 tokens (5 conditions)")
    ruler_sites: tuple[str, ...] = budget(("value_excl_self", "value_full"), "of the compared sites, those whose "
                                          "removals RULER scores besides the unedited model (the paper's Table 2: "
                                          "the two value-space sites)", item=str,
                                          cost="~11 s per site at the defaults (2 scales x 2 tasks x 2 samples)")
    ruler_lengths: tuple[int, ...] = budget((1024,), "RULER prompt lengths in tokens, e.g. 1024,2048,4096", item=int,
                                            cost="~5 s per sample and condition at 1024 tokens, "
                                                 "growing faster than linearly with the length")
    ruler_samples: int = budget(1, "RULER samples per task and length (below 10: indication only)",
                                cost="~15 bare forwards per sample at the defaults (2 tasks x 5 conditions "
                                     "at 1024 tokens)")
    ruler_template: str = budget("base", "RULER prompts as raw text (base) or in the tokenizer's chat template",
                                 choices=("base", "chat"))
    head_texts: int = budget(8, "texts for the head maps", cost="~10 s per text (82 s at 8 texts of 128 tokens, "
                                                                 "5 blocks)")
    head_len: int = budget(128, "tokens per head-map text", cost="~0.6 s per token at 8 texts and 5 blocks")
    head_layers: tuple[int, ...] | None = budget(None, "blocks of the head sensitivity map (default: every "
                                                 "6th block after skip_first)", item=int,
                                                 cost="~16 s per block at 8 texts of 128 tokens")
    n_boot: int = budget(1000, "bootstrap resamples of the head sensitivity CIs")
    n_perm: int = budget(2000, "sign-flip permutations of the head sensitivity tests")
    mlp_tokens: int = budget(512, "tokens scored by the MLP carrier step",
                             cost="~0.035 s per token (18 s at 512: 11 runs)")
    closed_form_tokens: int = budget(64, "tokens of the closed-form check",
                                     cost="~0.04 s per token (2.6 s at 64)")

    def check(self, model: Model) -> None:
        """Fail before any work when a budget does not fit ``model``."""
        if self.context > model.cfg.n_ctx:
            raise ValueError(f"context {self.context} exceeds the model's n_ctx {model.cfg.n_ctx}")


register_family(FAMILY, DecompositionBudgets, headline=headline,
                title="Directional decomposition (seed paper 000)")


@register_analysis_step("profile", FAMILY, PROFILE,
                        lambda b: ProfileConfig(tokens=b.profile_tokens, seq_len=b.context),
                        "parallel ratios per layer and site (Figure 1 analogue)")
def _profile_section(ctx: StepContext, result: ProfileResult) -> None:
    b, summary = ctx.budget, result.profile_summary
    if summary is None:
        return
    ctx.report.section("1. How parallel are the updates? (Figure 1 analogue)",
                       "Per layer and site: the median over tokens of the parallel ratio |alpha| ||r|| / ||y_perp|| "
                       "of the update y against its reference r (position 0, the attention sink, left out). A ratio "
                       "above 1 means the update is mostly a rescaling of its reference; the paper's Figure 1 "
                       f"({PAPER_PROFILE_MODEL}) has the parallel part dominating.")
    ctx.report.figure(plot_profile(summary),
                      f"Median parallel ratio per layer (x, integer block index) for each site (one line each, "
                      f"log y axis), {b.profile_tokens} tokens. Points above the dashed line at 1 are layers where "
                      "the parallel part of the update is larger than the perpendicular part.")
    wide = summary.pivot(index="layer", columns="site", values="parallel_ratio_median").reset_index()
    ctx.report.table(wide, "Median parallel ratio per layer (rows) and site (columns), the numbers of the figure "
                           "above; > 1: parallel part dominates.")


@register_step("sweeps", FAMILY, ("sweeps",),
               "ΔPPL over the s_par and s_perp grids at every site (Figure 3)")
def _step_sweeps(ctx: StepContext) -> None:
    b = ctx.budget
    df = ctx.cached("sweeps", lambda: sensitivity_sweep(
        ctx.model, ctx.text, s_par_grid=b.s_par_grid, s_perp_grid=b.s_perp_grid,
        skip_first=b.skip_first, context=b.context, max_tokens=b.sweep_tokens,
        batch_size=max(1, 1024 // b.context), log_path=ctx.log("sweeps"), progress=True))
    base = float((df["ppl"] - df["delta_ppl"]).median())  # the unedited perplexity (every row knows it)
    few = (f" Only {b.sweep_tokens} tokens: differences of a point or two are an indication only."
           if b.sweep_tokens < MIN_PPL_TOKENS else "")
    ctx.report.section("2. Sensitivity sweeps (Figure 3)",
                       f"Perplexity on {ctx.cfg.corpus} ({b.sweep_tokens} tokens, context {b.context}) with the "
                       f"parallel part (s_par) or the perpendicular part (s_perp) of every site scaled in blocks "
                       f"{b.skip_first}..; unedited perplexity {base:.2f}." + few)
    ctx.report.figure(plot_sweep(df),
                      "ΔPPL against the scale, left: s_par (s_perp = 1), right: s_perp (s_par = 1); one line per "
                      "site. The dashed lines cross at the unedited model (scale 1, ΔPPL 0); 0 removes that part, "
                      "values above 1 amplify it. The y axis is symmetric-log when ΔPPL spans decades: a site "
                      "whose line stays near 0 tolerates the edit.")
    wide = df.pivot_table(index=["axis", "site"], columns="scale", values="ppl").reset_index()
    wide.columns = [c if isinstance(c, str) else f"{c:g}" for c in wide.columns]
    ctx.report.table(wide, f"Perplexity (not ΔPPL) at each scale (columns) per axis and site (rows); unedited "
                           f"perplexity {base:.2f}, so a value near it means the edit costs nothing.")


def _compare_edits(b: DecompositionBudgets) -> list[Edit]:
    return [Edit(s, s_par=float(v), skip_first=b.skip_first) for s in b.compare_sites for v in b.compare_scales]


def _ppl_from_sweeps(ctx: StepContext, edits: list[Edit]) -> pd.DataFrame | None:
    """The comparison's perplexities read from this run's sweep table, where it measured every edit
    (its s_par axis: s_perp = 1, the same tokens, context and skip_first); ``None`` where it did not.

    The same numbers as :func:`~.compare.compare_edits` (a sweep point resumes at ``skip_first`` from
    the clean run, which equals the full forward), without measuring them twice; ``word_ppl`` is
    left out (the comparison does not use it)."""
    path = ctx.csv("sweeps")
    if not path.exists():
        return None
    sweeps = pd.read_csv(path)
    points = sweeps[sweeps["axis"] == "s_par"].set_index(["site", "scale"])
    wanted = [(e.site.name, float(e.s_par)) for e in edits]
    if not all(k in points.index for k in wanted):
        return None
    base_ppl = float((sweeps["ppl"] - sweeps["delta_ppl"]).median())
    rows = [{**baseline_key(), "ppl": base_ppl, "nll": float(np.log(base_ppl)),
             "n_tokens": int(sweeps["n_tokens"].iloc[0])}]
    for e, k in zip(edits, wanted):
        rows.append({**e.describe(), **points.loc[k, ["ppl", "nll", "n_tokens"]].to_dict()})
    df = pd.DataFrame(rows).astype({"n_tokens": int}).assign(source="sweeps")
    df["delta_ppl"] = df["ppl"] - base_ppl
    return df


def _label(edit) -> str:
    return f"{edit.site.name} s_par={edit.s_par:g}"


@register_step("compare", FAMILY,
               ("compare_ppl", "compare_zeroshot", "compare_zeroshot_paired", "compare_ruler", "compare"),
               "exclude-self vs full vs residual vs diagonal at s_par in {0, 0.5}: perplexity, zero-shot, RULER")
def _step_compare(ctx: StepContext) -> None:
    from tqdm.auto import tqdm

    b, model = ctx.budget, ctx.model
    edits = _compare_edits(b)

    def measured() -> pd.DataFrame:  # the sweeps step measured them all at the defaults
        shared = _ppl_from_sweeps(ctx, edits)
        return shared if shared is not None else compare_edits(
            model, ctx.text, edits, context=b.context, max_tokens=b.sweep_tokens,
            batch_size=max(1, 1024 // b.context), log_path=ctx.log("compare_ppl"), progress=True)

    ppl = ctx.cached("compare_ppl", measured)
    conditions = [("unedited", [])] + [(_label(e), e.hooks(model)) for e in edits]

    scored_zs = [(label, hooks) for (label, hooks), e in zip(conditions, [None, *edits])
                 if e is None or float(e.s_par) in b.zeroshot_scales]

    def zeroshot() -> pd.DataFrame:  # conditions > tasks > scoring batches
        frames = [evaluate_zeroshot(model, b.zeroshot_tasks, limit=b.zeroshot_limit, fwd_hooks=hooks,
                                    tag=label, log_path=ctx.log("zeroshot"), progress=True).assign(condition=label)
                  for label, hooks in tqdm(scored_zs, desc="zero-shot conditions", unit="condition")]
        return pd.concat(frames, ignore_index=True)

    def ruler() -> pd.DataFrame:  # conditions > (task, length) cells > samples
        lengths = [n for n in b.ruler_lengths if n <= model.cfg.n_ctx]
        if not lengths or not b.ruler_tasks:
            return pd.DataFrame(columns=["condition", "task", "length", "n", "score"])
        scored = [(label, hooks) for label, hooks in conditions
                  if label == "unedited" or label.split(" ")[0] in b.ruler_sites]
        frames = [evaluate_ruler(model, b.ruler_tasks, lengths, b.ruler_samples, fwd_hooks=hooks,
                                 label=label, seed=ctx.cfg.seed, template=b.ruler_template,
                                 log_path=ctx.log("ruler"), progress=True).assign(condition=label)
                  for label, hooks in tqdm(scored, desc="RULER conditions", unit="condition")]
        return pd.concat(frames, ignore_index=True).drop(columns=["preds"], errors="ignore")

    def zeroshot_paired() -> pd.DataFrame:  # per-item results come back from the zero-shot log
        items = {label: evaluate_zeroshot(model, b.zeroshot_tasks, limit=b.zeroshot_limit, fwd_hooks=hooks,
                                          tag=label, log_path=ctx.log("zeroshot"), return_items=True)[1]
                 for label, hooks in tqdm(scored_zs, desc="zero-shot paired", unit="condition")}
        base = items.pop("unedited")
        return pd.concat([paired_accuracy_change(it, base, seed=ctx.cfg.seed).assign(condition=label)
                          for label, it in items.items()], ignore_index=True)

    zs = ctx.cached("compare_zeroshot", zeroshot) if b.zeroshot_tasks else pd.DataFrame(
        columns=["condition", "task", "n", "acc", "acc_norm"])
    zs_paired = ctx.cached("compare_zeroshot_paired", zeroshot_paired) if b.zeroshot_tasks else None
    rl = ctx.cached("compare_ruler", ruler)
    ppl = ppl.assign(condition=["unedited"] + [_label(e) for e in edits])
    table = ppl[["condition", "ppl", "delta_ppl"]].merge(
        zs.groupby("condition", sort=False)[["acc", "acc_norm"]].mean().mul(100).add_prefix("zeroshot_").reset_index(),
        on="condition", how="left",
    ).merge(rl.groupby("condition", sort=False)["score"].mean().rename("ruler").reset_index(), on="condition", how="left")
    stamp(table, ctx.identity).to_csv(ctx.csv("compare"), index=False)

    n_zs = int(zs["n"].min()) if len(zs) else None
    n_rl = int(rl["n"].min()) if len(rl) else None
    zs_small = n_zs is not None and n_zs < MIN_ZEROSHOT_ITEMS
    rl_small = n_rl is not None and n_rl < MIN_RULER_SAMPLES
    zs_note, rl_note = (" (indication only)" if zs_small else ""), (" (indication only)" if rl_small else "")
    too_long = [n for n in b.ruler_lengths if n > model.cfg.n_ctx]
    why = (f"its lengths {too_long} exceed the model's context of {model.cfg.n_ctx} tokens" if too_long
           else "no task or length was given")
    rl_skipped = "" if len(rl) else f" RULER was not run: {why}."
    ctx.report.section("3. Which parallel removal is cheapest? (Tables 1, 2, 8)",
                       f"Each site's parallel part scaled by s_par in {list(b.compare_scales)} in blocks "
                       f"{b.skip_first}..: perplexity ({b.sweep_tokens} tokens), zero-shot accuracy (unedited and s_par in "
                       f"{list(b.zeroshot_scales)}) averaged over "
                       f"{', '.join(b.zeroshot_tasks) or 'no tasks'} (first {b.zeroshot_limit} items each, %), and "
                       f"RULER-style score (unedited and {', '.join(b.ruler_sites) or 'no site'}) over "
                       f"{', '.join(b.ruler_tasks) or 'no tasks'} at "
                       f"{list(b.ruler_lengths)} tokens ({b.ruler_samples} samples each, {b.ruler_template} "
                       f"prompts, %). The paper's columns: zero-shot of {PAPER_ZEROSHOT_MODEL}, RULER of "
                       f"{PAPER_RULER_MODEL} — other models and budgets, so compare orderings, not values."
                       + rl_skipped)
    shown = pd.DataFrame({"condition": table["condition"], "PPL": table["ppl"], "ΔPPL": table["delta_ppl"],
                          "zero-shot acc %" + zs_note: table["zeroshot_acc"],
                          "paper zero-shot acc %": [paper_value(PAPER.get(("zeroshot", c, "acc")))
                                                    for c in table["condition"]],
                          "zero-shot acc_norm %" + zs_note: table["zeroshot_acc_norm"],
                          "RULER %" + rl_note: table["ruler"],
                          "paper RULER %": [paper_value(PAPER.get(("ruler", c, "score"))) for c in table["condition"]]})
    small = [f"zero-shot on {n_zs} items per task" if zs_small else "",
             f"RULER on {n_rl} samples per task and length" if rl_small else ""]
    ctx.report.table(shown, "One row per condition (site and s_par; unedited first). Lower ΔPPL and higher "
                            "accuracy / score are better; the cheapest removal is the s_par = 0 row with the "
                            "smallest ΔPPL. A dash: no paper number for that condition." +
                     (f" Indication only: {' and '.join(x for x in small if x)}." if any(small) else ""))
    if len(zs):
        order = list(dict.fromkeys(zs["condition"]))
        per_task = zs.pivot_table(index="condition", columns="task", values=["acc", "acc_norm"], sort=False) * 100
        per_task = per_task.reindex(order)
        per_task.columns = [f"{task} {metric} %" for metric, task in per_task.columns]
        per_task = per_task[[f"{t} {m} %" for t in dict.fromkeys(zs["task"]) for m in ("acc", "acc_norm")]]
        ctx.report.table(per_task.reset_index(),
                         ("Indication only: " if zs_small else "") +
                         f"zero-shot accuracy per task (%; {n_zs} items each; acc_norm: length-normalised "
                         "log-likelihood), one row per condition.")
    if zs_paired is not None:
        paired_shown = zs_paired[["condition", "metric", "delta", "ci_low", "ci_high", "p", "n"]].copy()
        paired_shown[["delta", "ci_low", "ci_high"]] = paired_shown[["delta", "ci_low", "ci_high"]].round(1)
        ctx.report.table(paired_shown.rename(columns={"delta": "Δ points", "ci_low": "CI low", "ci_high": "CI high"}),
            ("Indication only: " if zs_small else "") +
            "zero-shot change against the unedited model on the same items, pooled over tasks (percentage "
            "points; 95% bootstrap CI; sign-flip p). A CI that contains 0 is no evidence of a change.")
    if len(rl):
        order = list(dict.fromkeys(rl["condition"]))
        cells = rl.assign(cell=[f"{t} @{int(n)} %" for t, n in zip(rl["task"], rl["length"])])
        per_cell = cells.pivot_table(index="condition", columns="cell", values="score", sort=False).reindex(order)
        per_cell.columns.name = None
        ctx.report.table(per_cell.reset_index(),
                         ("Indication only: " if rl_small else "") +
                         f"RULER-style long-context score per task and prompt length in tokens (%; {n_rl} "
                         "samples each), one row per condition.")


def _head_layers(b: DecompositionBudgets, n_layers: int) -> list[int]:
    if b.head_layers is not None:
        return list(b.head_layers)
    return list(range(max(b.skip_first, 1), n_layers, 6))


@register_step("heads", FAMILY, ("heads_alpha", "heads_sensitivity"),
               "per-head alpha map and causal sensitivity (Figure 7)")
def _step_heads(ctx: StepContext) -> None:
    b, model = ctx.budget, ctx.model
    texts = corpus_batches(model, ctx.text, b.head_len, b.head_texts * b.head_len + 8)[: b.head_texts]
    alpha = ctx.cached("heads_alpha", lambda: head_alpha_map(model, texts, progress=True))
    sens = ctx.cached("heads_sensitivity", lambda: head_sensitivity(
        model, texts, layers=_head_layers(b, model.cfg.n_layers), n_boot=b.n_boot, n_perm=b.n_perm,
        seed=ctx.cfg.seed, log_path=ctx.log("heads_sensitivity"), progress=True))
    n_texts = int(sens["n_texts"].min()) if len(sens) else len(texts)
    note = indication_note(n_texts, MIN_HEAD_TEXTS, "texts")
    ctx.report.section("4. Heads (Figure 7)",
                       f"Mean alpha of the exclude-self update per head ({len(texts)} texts of {b.head_len} "
                       "tokens), and the change of loss when its parallel part is removed in one head "
                       f"(token-weighted bootstrap CI, {b.n_boot} resamples; sign-flip test, {b.n_perm} "
                       "permutations; Benjamini–Hochberg q). The paper finds heads of both signs.")
    ctx.report.figure(plot_head_maps(alpha, sens),
                      "Left: mean alpha per layer (rows) and head (columns): red > 0 (the message from the other "
                      "tokens points along the token's own value), blue < 0, white 0. Right: loss change (nats) when the parallel part is "
                      "removed in that head only, for the probed layers; red: the head's parallel part helps, "
                      "* marks q < 0.05." + (f" Indication only: {n_texts} texts." if note else ""))
    top = sens[sens["head"].astype(str) != "all"].sort_values("delta_loss")
    cols = ["layer", "head", "delta_loss", "ci_low", "ci_high", "p", "q", "n_texts"]
    ctx.report.table(pd.concat([top.head(5), top.tail(5)]).drop_duplicates()[cols].rename(
        columns={"delta_loss": "Δ loss (nats)", "ci_low": "CI low", "ci_high": "CI high"}),
        (f"Indication only ({n_texts} texts). " if note else "") +
        "The five least (top) and most (bottom) sensitive single heads: loss change when the head's parallel "
        "part is removed, 95% CI, sign-flip p and BH q over all heads and layers.")


@register_step("mlp", FAMILY, ("mlp_carrier",),
               "MLP carrier: No-Para vs No-Perp Δloss (Table 10)")
def _step_mlp(ctx: StepContext) -> None:
    b = ctx.budget
    df = ctx.cached("mlp_carrier", lambda: mlp_carrier_table(
        ctx.model, ctx.text, max_tokens=b.mlp_tokens, context=b.context, skip_first=b.skip_first,
        batch_size=max(1, 1024 // b.context), log_path=ctx.log("mlp_carrier"), progress=True))
    ctx.report.section("5. MLP carrier (Table 10)",
                       "Mean NLL change when the parallel (No-Para) or perpendicular (No-Perp) part is removed "
                       "at the residual MLP site, inside the MLP relative to its input (h vs x), and per "
                       f"down-projection block (y_g vs h_g), in blocks {b.skip_first}.. ({b.mlp_tokens} tokens).")
    wide = carrier_table_wide(df).reset_index()
    wide.columns.name = None
    for r in ("no_para", "no_perp"):
        wide[f"paper {r}"] = [paper_value(PAPER.get(("mlp_carrier", l, r))) if n in ("-", "include") else "—"
                              for l, n in zip(wide["label"], wide["narrow"])]
    ctx.report.table(wide, "Δ mean NLL (nats) against the unedited model, one row per site (narrow: the last, "
                           "narrower down-projection block edited too, 'include', or left alone, 'skip'). "
                           "The perpendicular part carries the MLP when No-Perp is far larger than No-Para. "
                           f"Paper: {PAPER_SMALL_MODEL}.")


_CF_EXPECTED = {"value_full": "exact (float rounding)", "value_excl_self": "exact (float rounding)",
                "attn": "exact only along z: expected to fail"}


@register_step("closed_form", FAMILY, ("closed_form_errors", "closed_form_diag"),
               "the diagonal closed form reproduces the value-space edit (Table 5, Figure 4)")
def _step_closed_form(ctx: StepContext) -> None:
    b, model = ctx.budget, ctx.model
    tokens = corpus_batches(model, ctx.text, b.closed_form_tokens, b.closed_form_tokens + 8)[:1]
    res = closed_form_check(model, tokens, 0.0, skip_first=b.skip_first, progress=True)
    stamp(res.errors, ctx.identity).to_csv(ctx.csv("closed_form_errors"), index=False)
    summary = diag_summary(res.diag)
    stamp(summary, ctx.identity).to_csv(ctx.csv("closed_form_diag"), index=False)
    layer = model.cfg.n_layers // 2
    ctx.report.section("6. The diagonal closed form (Table 5, Figure 4)",
                       "A value-space parallel edit changes only the attention diagonal: "
                       "ΔA_tt = (s_par − 1)<o_t, v_t>/||v_t||² (c_t for exclude-self). Editing the pattern "
                       "by this amount reproduces the edit. The residual-space (attn) form, one coefficient per "
                       "token shared by all heads, matches the edit only along z = resid_pre, so its rows are "
                       "expected to fail: that is the point of the comparison.")
    errs = res.summary()
    errs.insert(1, "expected", [_CF_EXPECTED.get(v, "") for v in errs["variant"]])
    ctx.report.table(errs, f"Largest |closed form − edit| over blocks {b.skip_first}.. at s_par = 0 "
                           f"({b.closed_form_tokens} tokens), per variant and quantity (z: per-head outputs, "
                           "attn_out: after W_O, logits). rel_err: largest error norm over the RMS reference norm; "
                           "value_full / value_excl_self are exact up to float rounding (~1e-6); the attn rows "
                           "are expected to fail (exact only along z).")
    ctx.report.table(
        summary.set_index("variant").T.rename_axis("quantity").reset_index(), by_row=True, caption=(
            "The attention diagonal A_tt before and after the closed-form edit (means, min, max over tokens past "
            "position 0, heads and blocks; one column per variant); share_negative: edited diagonals below 0 "
            "(the closed form does not renormalise rows). attn only: resid_local_rel_err, the edit's miss off z "
            "relative to ||attn_out|| (large: expected), and resid_local_par_rel_err, its miss along z (~0: "
            "exact there)."))
    ctx.report.figure(plot_diagonal(res.diag, "value_excl_self", layer, head=0),
                      f"A_tt of block {layer}, head 0, per position t (x): top the original diagonal weight, "
                      "bottom after the exclude-self closed-form edit at s_par = 0 (one colour scale, white = 0; "
                      "blue: negative weights, which the edit allows).")
    ctx.report.circuitsvis(attention_before_after(model, tokens, layer, "value_excl_self", 0.0, heads=[0, 1]),
                           f"Block {layer}, heads 0–1: the attention pattern before and after the closed-form edit "
                           "(pick a head to view; only the diagonal differs).")


def _paper_audit(site: str) -> str:
    """``25.15% / 9.32% / 95.01%``: the paper's perturbation / energy / retained of ``site``."""
    return " / ".join(f"{PAPER[('audit', site, f'{q} %')]:.2f}%" for q in ("perturbation", "energy", "retained"))


@register_step("audit", FAMILY, ("audit_layers", "audit"),
               "post-W_O perturbation / energy / retained norm (Table 6)")
def _step_audit(ctx: StepContext) -> None:
    b, model = ctx.budget, ctx.model
    tokens = corpus_batches(model, ctx.text, min(b.context, 256), 4 * 256 + 8)[:4]
    # mode "all": every block edited at once, one forward per site (as the edit is used)
    per_layer = ctx.cached("audit_layers", lambda: post_wo_audit(
        model, tokens, mode="all", skip_first=b.skip_first, log_path=ctx.log("audit"), progress=True))
    overall = audit_overall(per_layer)
    stamp(overall, ctx.identity).to_csv(ctx.csv("audit"), index=False)
    ctx.report.section("7. Post-W_O audit (Table 6)",
                       "At s_par = 0, all blocks edited: ||y~ − y||/||y|| (perturbation), its square (energy) and "
                       "||y~||/||y|| (retained) of the attention output after W_O, per token, averaged over tokens "
                       f"and blocks. {PAPER_SMALL_MODEL} in the paper: residual attention {_paper_audit('attn')}; "
                       f"exclude-self {_paper_audit('value_excl_self')}.")
    shown = pd.DataFrame({"site": overall["site"]})
    for q in ("perturbation", "energy", "retained"):
        shown[f"{q} %"] = 100 * overall[f"{q}_mean"]
        shown[f"paper {q} %"] = [paper_value(PAPER.get(("audit", site, f"{q} %"))) for site in overall["site"]]
    ctx.report.table(shown, f"In % like the paper ({PAPER_SMALL_MODEL}): the token-weighted mean of the per-token "
                            f"ratios over {int(overall['n_layers'].max())} edited blocks, next to the paper's value. "
                            "A larger perturbation for exclude-self than for the residual edit (attn) is the "
                            "paper's point: the exclude-self parallel part is a larger share of the output.")
    pooled = pd.DataFrame({"site": overall["site"],
                           **{f"pooled {q} %": 100 * overall[f"{q}_pooled"] for q in ("perturbation", "energy",
                                                                                        "retained")}})
    ctx.report.table(pooled, "The same ratios pooled (sums over tokens and blocks before dividing, %): "
                             "dominated by the tokens with the largest outputs.")
