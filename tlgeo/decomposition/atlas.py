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

:func:`headline` opens the report: a few sentences of what this model shows
next to the paper (:data:`PAPER`), computed from the CSVs by
:func:`atlas_summary`, and warnings where a budget is too small to conclude
anything (those tables also say "indication only").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import json
import math

import pandas as pd

from ..evals.ruler import evaluate_ruler
from ..evals.zeroshot import evaluate_zeroshot, paired_accuracy_change
from ..hooks.edits import Edit
from ..pipeline import Headline, StepContext, budget, register_family, register_step
from .audit import audit_overall, post_wo_audit
from .closed_form import attention_before_after, closed_form_check, diag_summary, plot_diagonal
from .compare import compare_edits
from .heads import head_alpha_map, head_sensitivity, plot_head_maps
from .mlp_carrier import carrier_table_wide, mlp_carrier_table
from .observe import corpus_batches, parallel_profile, plot_profile, summarize_profile
from .sweeps import plot_sweep, sensitivity_sweep

__all__ = ["FAMILY", "DecompositionBudgets", "PAPER", "atlas_summary", "headline", "MIN_ZEROSHOT_ITEMS",
           "MIN_RULER_SAMPLES", "MIN_HEAD_TEXTS", "MIN_PPL_TOKENS"]

FAMILY = "decomposition"


@dataclass
class DecompositionBudgets:
    """Budgets of the directional-decomposition steps (tokens, tasks, lengths, resamples)."""

    skip_first: int = budget(1, "leave the first n blocks unedited (the reference code: 1)")
    context: int = budget(256, "tokens per window for perplexity, sweeps and the MLP carrier")
    profile_tokens: int = budget(512, "tokens profiled (profile step)",
                                 cost="~0.006 s per token (3 s at 512)")
    sweep_tokens: int = budget(512, "tokens scored per sweep point and comparison condition", flag="--tokens",
                               cost="~0.18 s per token: sweeps ~0.15 (78 s at 512), compare perplexity ~0.03")
    s_par_grid: tuple[float, ...] = budget((-1.0, 0.0, 0.5, 1.5, 3.0), "s_par values swept", item=float,
                                           cost="~12 s per value at 512 tokens (6 sites x ~2 s)")
    s_perp_grid: tuple[float, ...] = budget((0.0, 0.5, 1.5), "s_perp values swept", item=float,
                                            cost="~10 s per value at 512 tokens (5 sites x ~2 s)")
    compare_sites: tuple[str, ...] = budget(("value_excl_self", "value_full", "attn", "diag"),
                                            "sites compared", item=str,
                                            cost="~70 s per site at the defaults (2 scales x perplexity, "
                                                 "zero-shot and RULER)")
    compare_scales: tuple[float, ...] = budget((0.0, 0.5), "s_par values compared", item=float,
                                               cost="~140 s per value at the defaults (4 sites)")
    zeroshot_tasks: tuple[str, ...] = budget(("piqa", "arc_easy", "winogrande"),
                                             "zero-shot tasks (piqa,arc_easy,arc_challenge,openbookqa,winogrande,boolq)",
                                             item=str, cost="~36 s per task at 20 items (9 conditions)")
    zeroshot_limit: int = budget(20, "first n items of each zero-shot task (below 50: indication only)",
                                 cost="~5.4 s per item at the defaults (3 tasks x 9 conditions x ~0.2 s)")
    ruler_tasks: tuple[str, ...] = budget(("niah_single", "vt"), "RULER-style tasks", item=str,
                                          cost="~93 s per task at 2 samples of 1024 tokens (9 conditions)")
    ruler_lengths: tuple[int, ...] = budget((1024,), "RULER prompt lengths in tokens, e.g. 1024,2048,4096", item=int,
                                            cost="~5 s per sample and condition at 1024 tokens, "
                                                 "growing faster than linearly with the length")
    ruler_samples: int = budget(2, "RULER samples per task and length (below 10: indication only)",
                                cost="~93 s per sample at the defaults (2 tasks x 9 conditions x ~5 s at "
                                     "1024 tokens)")
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

    def check(self, model) -> None:
        """Fail before any work when a budget does not fit ``model``."""
        if self.context > model.cfg.n_ctx:
            raise ValueError(f"context {self.context} exceeds the model's n_ctx {model.cfg.n_ctx}")


# Below these budgets a result is an indication only: the headline warns, and the
# tables that show it say so (in a column header or the caption).
MIN_ZEROSHOT_ITEMS = 50  # per task
MIN_RULER_SAMPLES = 10  # per task and length
MIN_HEAD_TEXTS = 16  # texts of the head sensitivity map
MIN_PPL_TOKENS = 2048  # tokens of the perplexity comparisons


def _indication(n: int | None, minimum: int, unit: str) -> str:
    """``" (20 items: indication only)"`` when ``n < minimum``, else ``""``."""
    return f" ({n} {unit}: indication only)" if n is not None and n < minimum else ""


def _paper(v) -> str:
    """A paper number as published (a table column of strings is not re-rounded), "—" if none."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return v if isinstance(v, str) else f"{v:.2f}" if abs(v) >= 1 else f"{v:.4f}"  # the paper's decimals


def _headline(out: Path, budgets: "DecompositionBudgets") -> Headline:  # registered below, defined at the end
    return headline(out, budgets)


register_family(FAMILY, DecompositionBudgets, headline=_headline)


@register_step("profile", FAMILY, ("profile_summary",),
               "parallel ratios per layer and site (Figure 1 analogue)")
def _step_profile(ctx: StepContext) -> None:
    b = ctx.budget
    summary = ctx.cached("profile_summary", lambda: summarize_profile(parallel_profile(
        ctx.model, ctx.text, seq_len=min(b.context, ctx.model.cfg.n_ctx), max_tokens=b.profile_tokens,
        progress=True)))
    ctx.report.section("1. How parallel are the updates? (Figure 1 analogue)",
                       "Per layer and site: the median over tokens of the parallel ratio |alpha| ||r|| / ||y_perp|| "
                       "of the update y against its reference r (position 0, the attention sink, left out). A ratio "
                       "above 1 means the update is mostly a rescaling of its reference; the paper's Figure 1 "
                       "(Qwen3-4B) has the parallel part dominating.")
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


def _label(edit) -> str:
    return f"{edit.site.name} s_par={edit.s_par:g}"


@register_step("compare", FAMILY,
               ("compare_ppl", "compare_zeroshot", "compare_zeroshot_paired", "compare_ruler", "compare"),
               "exclude-self vs full vs residual vs diagonal at s_par in {0, 0.5}: perplexity, zero-shot, RULER")
def _step_compare(ctx: StepContext) -> None:
    from tqdm.auto import tqdm

    b, model = ctx.budget, ctx.model
    edits = _compare_edits(b)
    ppl = ctx.cached("compare_ppl", lambda: compare_edits(
        model, ctx.text, edits, context=b.context, max_tokens=b.sweep_tokens,
        batch_size=max(1, 1024 // b.context), log_path=ctx.log("compare_ppl"), progress=True))
    conditions = [("unedited", [])] + [(_label(e), e.hooks(model)) for e in edits]

    def zeroshot() -> pd.DataFrame:  # conditions > tasks > scoring batches
        frames = [evaluate_zeroshot(model, b.zeroshot_tasks, limit=b.zeroshot_limit, fwd_hooks=hooks,
                                    tag=label, log_path=ctx.log("zeroshot"), progress=True).assign(condition=label)
                  for label, hooks in tqdm(conditions, desc="zero-shot conditions", unit="condition")]
        return pd.concat(frames, ignore_index=True)

    def ruler() -> pd.DataFrame:  # conditions > (task, length) cells > samples
        lengths = [n for n in b.ruler_lengths if n <= model.cfg.n_ctx]
        if not lengths or not b.ruler_tasks:
            return pd.DataFrame(columns=["condition", "task", "length", "n", "score"])
        frames = [evaluate_ruler(model, b.ruler_tasks, lengths, b.ruler_samples, fwd_hooks=hooks,
                                 label=label, seed=ctx.cfg.seed, template=b.ruler_template,
                                 log_path=ctx.log("ruler"), progress=True).assign(condition=label)
                  for label, hooks in tqdm(conditions, desc="RULER conditions", unit="condition")]
        return pd.concat(frames, ignore_index=True).drop(columns=["preds"], errors="ignore")

    def zeroshot_paired() -> pd.DataFrame:  # per-item results come back from the zero-shot log
        items = {label: evaluate_zeroshot(model, b.zeroshot_tasks, limit=b.zeroshot_limit, fwd_hooks=hooks,
                                          tag=label, log_path=ctx.log("zeroshot"), return_items=True)[1]
                 for label, hooks in tqdm(conditions, desc="zero-shot paired", unit="condition")}
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
    table.to_csv(ctx.csv("compare"), index=False)

    n_zs = int(zs["n"].min()) if len(zs) else None
    n_rl = int(rl["n"].min()) if len(rl) else None
    zs_small = n_zs is not None and n_zs < MIN_ZEROSHOT_ITEMS
    rl_small = n_rl is not None and n_rl < MIN_RULER_SAMPLES
    zs_note, rl_note = (" (indication only)" if zs_small else ""), (" (indication only)" if rl_small else "")
    ctx.report.section("3. Which parallel removal is cheapest? (Tables 1, 2, 8)",
                       f"Each site's parallel part scaled by s_par in {list(b.compare_scales)} in blocks "
                       f"{b.skip_first}..: perplexity ({b.sweep_tokens} tokens), zero-shot accuracy averaged over "
                       f"{', '.join(b.zeroshot_tasks) or 'no tasks'} (first {b.zeroshot_limit} items each, %), and "
                       f"RULER-style score over {', '.join(b.ruler_tasks) or 'no tasks'} at "
                       f"{list(b.ruler_lengths)} tokens ({b.ruler_samples} samples each, {b.ruler_template} "
                       f"prompts, %). The paper's columns: zero-shot of {PAPER_ZEROSHOT_MODEL}, RULER of "
                       f"{PAPER_RULER_MODEL} — other models and budgets, so compare orderings, not values.")
    shown = pd.DataFrame({"condition": table["condition"], "PPL": table["ppl"], "ΔPPL": table["delta_ppl"],
                          "zero-shot acc %" + zs_note: table["zeroshot_acc"],
                          "paper zero-shot acc %": [_paper(PAPER.get(("zeroshot", c, "acc")))
                                                    for c in table["condition"]],
                          "zero-shot acc_norm %" + zs_note: table["zeroshot_acc_norm"],
                          "RULER %" + rl_note: table["ruler"],
                          "paper RULER %": [_paper(PAPER.get(("ruler", c, "score"))) for c in table["condition"]]})
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
    note = _indication(n_texts, MIN_HEAD_TEXTS, "texts")
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
        wide[f"paper {r}"] = [_paper(PAPER.get(("mlp_carrier", l, r))) if n in ("-", "include") else "—"
                              for l, n in zip(wide["label"], wide["narrow"])]
    ctx.report.table(wide, "Δ mean NLL (nats) against the unedited model, one row per site (narrow: the last, "
                           "narrower down-projection block edited too, 'include', or left alone, 'skip'). "
                           "The perpendicular part carries the MLP when No-Perp is far larger than No-Para. "
                           "Paper: Qwen3-0.6B.")


_CF_EXPECTED = {"value_full": "exact (float rounding)", "value_excl_self": "exact (float rounding)",
                "attn": "exact only along z: expected to fail"}


@register_step("closed_form", FAMILY, ("closed_form_errors", "closed_form_diag"),
               "the diagonal closed form reproduces the value-space edit (Table 5, Figure 4)")
def _step_closed_form(ctx: StepContext) -> None:
    b, model = ctx.budget, ctx.model
    tokens = corpus_batches(model, ctx.text, b.closed_form_tokens, b.closed_form_tokens + 8)[:1]
    res = closed_form_check(model, tokens, 0.0, skip_first=b.skip_first, progress=True)
    res.errors.to_csv(ctx.csv("closed_form_errors"), index=False)
    summary = diag_summary(res.diag)
    summary.to_csv(ctx.csv("closed_form_diag"), index=False)
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


@register_step("audit", FAMILY, ("audit_layers", "audit"),
               "post-W_O perturbation / energy / retained norm (Table 6)")
def _step_audit(ctx: StepContext) -> None:
    b, model = ctx.budget, ctx.model
    tokens = corpus_batches(model, ctx.text, min(b.context, 256), 4 * 256 + 8)[:4]
    # mode "all": every block edited at once, one forward per site (as the edit is used)
    per_layer = ctx.cached("audit_layers", lambda: post_wo_audit(
        model, tokens, mode="all", skip_first=b.skip_first, log_path=ctx.log("audit"), progress=True))
    overall = audit_overall(per_layer)
    overall.to_csv(ctx.csv("audit"), index=False)
    ctx.report.section("7. Post-W_O audit (Table 6)",
                       "At s_par = 0, all blocks edited: ||y~ − y||/||y|| (perturbation), its square (energy) and "
                       "||y~||/||y|| (retained) of the attention output after W_O, per token, averaged over tokens "
                       "and blocks. Qwen3-0.6B in the paper: residual attention 25.15% / 9.32% / 95.01%; "
                       "exclude-self 49.10% / 25.89% / 83.36%.")
    shown = pd.DataFrame({"site": overall["site"]})
    for q in ("perturbation", "energy", "retained"):
        shown[f"{q} %"] = 100 * overall[f"{q}_mean"]
        shown[f"paper {q} %"] = [_paper(PAPER.get(("audit", site, f"{q} %"))) for site in overall["site"]]
    ctx.report.table(shown, f"In % like the paper ({PAPER_SMALL_MODEL}): the token-weighted mean of the per-token "
                            f"ratios over {int(overall['n_layers'].max())} edited blocks, next to the paper's value. "
                            "A larger perturbation for exclude-self than for the residual edit (attn) is the "
                            "paper's point: the exclude-self parallel part is a larger share of the output.")
    pooled = pd.DataFrame({"site": overall["site"],
                           **{f"pooled {q} %": 100 * overall[f"{q}_pooled"] for q in ("perturbation", "energy",
                                                                                        "retained")}})
    ctx.report.table(pooled, "The same ratios pooled (sums over tokens and blocks before dividing, %): "
                             "dominated by the tokens with the largest outputs.")


# The paper's reference numbers for the rows of :func:`atlas_summary` (spec sections 4, 5, 7):
# zero-shot averages of Qwen3-1.7B (7 tasks), RULER-4k of Llama-3.2-3B, audit and MLP carrier
# of Qwen3-0.6B. Sweep tolerance: exclude-self stays within 1 PPL point for s_par in [0, 1].
PAPER = {
    ("ppl", "value_excl_self s_par=0", "delta_ppl"): "< 1",
    ("zeroshot", "unedited", "acc"): 61.61,
    ("zeroshot", "attn s_par=0", "acc"): 59.16,
    ("zeroshot", "value_full s_par=0", "acc"): 53.41,
    ("zeroshot", "value_excl_self s_par=0", "acc"): 60.10,
    ("zeroshot", "diag s_par=0", "acc"): 39.17,
    ("ruler", "unedited", "score"): 86.91,
    ("ruler", "value_full s_par=0.5", "score"): 84.81,
    ("ruler", "value_excl_self s_par=0.5", "score"): 86.69,
    ("ruler", "value_full s_par=0", "score"): 60.99,
    ("ruler", "value_excl_self s_par=0", "score"): 75.64,
    ("audit", "attn", "perturbation %"): 25.15,
    ("audit", "attn", "energy %"): 9.32,
    ("audit", "attn", "retained %"): 95.01,
    ("audit", "value_excl_self", "perturbation %"): 49.10,
    ("audit", "value_excl_self", "energy %"): 25.89,
    ("audit", "value_excl_self", "retained %"): 83.36,
    ("mlp_carrier", "residual mlp", "no_para"): 0.1165,
    ("mlp_carrier", "residual mlp", "no_perp"): 15.96,
    ("mlp_carrier", "h vs x", "no_para"): 0.0301,
    ("mlp_carrier", "h vs x", "no_perp"): 13.42,
    ("mlp_carrier", "y_g vs h_g", "no_para"): 0.0037,
    ("mlp_carrier", "y_g vs h_g", "no_perp"): 13.33,
    ("heads", "value_excl_self", "share alpha > 0"): "both signs",
}
# The paper's qualitative claims the headline tests against (no numbers to compare):
PAPER_PROFILE = "the parallel part dominates (median parallel ratio > 1; Figure 1, Qwen3-4B)"
PAPER_ZEROSHOT_MODEL = "Qwen3-1.7B, 7 tasks"
PAPER_RULER_MODEL = "Llama-3.2-3B at 4k tokens"
PAPER_SMALL_MODEL = "Qwen3-0.6B"


def atlas_summary(out: str | Path) -> pd.DataFrame:
    """The headline numbers of a finished (or partial) atlas directory, one row each.

    Columns ``table, row, quantity, value``: ``ppl`` (PPL and ΔPPL per comparison
    condition; ``s_perp=0`` rows from the sweep), ``zeroshot`` (mean accuracy, %),
    ``ruler`` (mean score, %), ``audit`` (%, token mean), ``mlp_carrier`` (Δ mean NLL,
    nats; carrier rows with the narrow block included), ``closed_form`` (max
    abs Δlogit), ``heads`` (share of heads with positive mean alpha). Steps without a
    CSV are left out.
    """
    out = Path(out)
    rows: list[tuple[str, str, str, float]] = []

    def read(name: str) -> pd.DataFrame | None:
        path = out / f"{name}.csv"
        return pd.read_csv(path) if path.exists() else None

    if (cmp := read("compare")) is not None:
        for r in cmp.itertuples():
            rows += [("ppl", r.condition, "ppl", r.ppl), ("ppl", r.condition, "delta_ppl", r.delta_ppl)]
            if pd.notna(getattr(r, "zeroshot_acc", float("nan"))):
                rows.append(("zeroshot", r.condition, "acc", r.zeroshot_acc))
            if pd.notna(getattr(r, "ruler", float("nan"))):
                rows.append(("ruler", r.condition, "score", r.ruler))
    if (sw := read("sweeps")) is not None:
        for r in sw[(sw["axis"] == "s_par") & (sw["scale"] == 0.0) & sw["site"].isin(["mlp", "block"])].itertuples():
            rows.append(("ppl", f"{r.site} s_par=0", "ppl", r.ppl))
        for r in sw[(sw["axis"] == "s_perp") & (sw["scale"] == 0.0)].itertuples():
            rows.append(("ppl", f"{r.site} s_perp=0", "ppl", r.ppl))
    if (au := read("audit")) is not None:
        for r in au.itertuples():
            for q in ("perturbation", "energy", "retained"):
                rows.append(("audit", r.site, f"{q} %", 100 * getattr(r, f"{q}_mean")))
    if (mc := read("mlp_carrier")) is not None:
        mc = mc[(mc["removal"] != "none") & (mc["narrow"].isin(["-", "include"]))]
        for r in mc.itertuples():
            rows.append(("mlp_carrier", r.label, r.removal, r.delta_loss))
    if (cf := read("closed_form_errors")) is not None:
        logits = cf[(cf["quantity"] == "logits") & cf["variant"].isin(["value_full", "value_excl_self"])]
        for variant, g in logits.groupby("variant", sort=False):
            rows.append(("closed_form", variant, "max abs dlogit", g["max_abs_err"].max()))
    if (ha := read("heads_alpha")) is not None:
        rows.append(("heads", "value_excl_self", "share alpha > 0", float((ha["alpha_mean"] > 0).mean())))
    return pd.DataFrame(rows, columns=["table", "row", "quantity", "value"])


# --------------------------------------------------------------------------- headline


def _num(v: float, digits: int = 3) -> str:
    """A number for a sentence: ``digits`` significant digits, no exponent between 1e-3 and 1e5
    (``165``, ``5.18``, ``0.119``), scientific outside (``8.2e8``, ``5e-5``); a true minus sign."""
    if v is None or not math.isfinite(v):
        return "n/a"
    a = abs(v)
    if a != 0 and (a >= 1e5 or a < 1e-3):
        mant, exp = f"{v:.{max(digits - 2, 0)}e}".split("e")
        t = f"{mant}e{int(exp)}"
    elif a >= 10 ** (digits - 1):
        t = f"{v:.0f}"
    else:
        t = f"{v:.{digits}g}"
    return t.replace("-", "−")


def _signed(v: float, digits: int = 3) -> str:
    t = _num(v, digits)
    return t if t.startswith("−") or t == "n/a" or t == "0" else "+" + t


def _site_of(condition: str) -> str:
    return condition.split(" s_par=")[0]


def headline(out: str | Path, budgets: DecompositionBudgets | None = None) -> Headline:
    """What the results in ``out`` show against the paper: up to eight sentences, one per
    step that is done (profile, cheapest removal, exclude-self vs full, downstream,
    audit, closed form, MLP carrier, heads), and warnings where a budget is below
    :data:`MIN_ZEROSHOT_ITEMS`, :data:`MIN_RULER_SAMPLES`, :data:`MIN_HEAD_TEXTS` or
    :data:`MIN_PPL_TOKENS`. Every number is read from the CSVs (the budgets actually
    used are read there too; ``budgets`` only fills in ``skip_first``)."""
    out = Path(out)
    summary = atlas_summary(out)
    val = {(t, r, q): v for t, r, q, v in summary.itertuples(index=False)}

    def read(name: str) -> pd.DataFrame | None:
        path = out / f"{name}.csv"
        return pd.read_csv(path) if path.exists() else None

    conf = json.loads((out / "config.json").read_text()) if (out / "config.json").exists() else {}
    corpus = conf.get("corpus", "the corpus")
    skip = budgets.skip_first if budgets is not None else conf.get("budgets", {}).get(FAMILY, {}).get("skip_first", 1)
    sentences: list[str] = []
    warnings: list[str] = []

    # 1. how parallel the updates are
    if (ps := read("profile_summary")) is not None and len(ps):
        med = ps.groupby("site", sort=False)["parallel_ratio_median"].median().sort_values()
        k, n = int((ps["parallel_ratio_median"] > 1).sum()), len(ps)
        top = ps.loc[ps["parallel_ratio_median"].idxmax()]
        dominates = k > n / 2
        sentences.append(
            f"Parallel part: the per-layer median parallel ratio exceeds 1 in {k} of {n} layer-site pairs "
            f"(median over layers: " + ", ".join(f"{s} {_num(v, 2)}" for s, v in med.items()) +
            f"; largest {_num(top['parallel_ratio_median'], 3)} at {top['site']}, layer {int(top['layer'])}); "
            f"the paper finds that {PAPER_PROFILE}, which this model {'shows' if dominates else 'does not show'}.")

    # 2. the cheapest parallel removal; 3. exclude-self against the paper's tolerance and the full removal
    cmp = read("compare")
    if cmp is not None and len(cmp):
        zero = cmp[cmp["condition"].str.endswith(" s_par=0")].sort_values("delta_ppl")
        base_ppl = float(cmp.loc[cmp["condition"] == "unedited", "ppl"].iloc[0]) if (
            cmp["condition"] == "unedited").any() else float("nan")
        if len(zero):
            first, rest = zero.iloc[0], zero.iloc[1:]
            text = (f"Cheapest parallel removal (s_par = 0, blocks {skip}..): {_site_of(first['condition'])}, "
                    f"ΔPPL {_signed(first['delta_ppl'])} on an unedited PPL of {_num(base_ppl)}")
            if len(rest):
                text += "; then " + ", ".join(f"{_site_of(c)} {_signed(d)}" for c, d in
                                              zip(rest["condition"], rest["delta_ppl"]))
            sentences.append(text + ".")
        by = cmp.set_index("condition")["delta_ppl"]
        scales = sorted({c.split("=")[1] for c in cmp["condition"] if "s_par=" in c}, key=float)
        es = [(v, by[f"value_excl_self s_par={v}"]) for v in scales if f"value_excl_self s_par={v}" in by]
        if es:
            tol = float(str(PAPER[("ppl", "value_excl_self s_par=0", "delta_ppl")]).strip("< "))
            band = [(v, d) for v, d in es if 0.0 <= float(v) <= 1.0]
            within = all(d < tol for _, d in band)
            text = ("Exclude-self removal costs " + " and ".join(f"{_signed(d)} PPL at s_par = {v}" for v, d in es))
            if band:
                text += (f", {'within' if within else 'outside'} the paper's band of < {tol:g} PPL point "
                         "for s_par in [0, 1]")
            full = [(v, d, by[f"value_full s_par={v}"]) for v, d in es if f"value_full s_par={v}" in by]
            if full:
                cheaper = all(d < f for _, d, f in full)
                text += ("; the full value-space removal costs " +
                         " and ".join(f"{_signed(f)}" for _, _, f in full) +
                         (", so exclude-self is the cheaper one, as in the paper" if cheaper else
                          ", so exclude-self is not cheaper at every scale, unlike the paper"))
            sentences.append(text + ".")

    # 4. downstream: zero-shot (paired changes) and RULER, each next to the paper
    zs = read("compare_zeroshot")
    paired = read("compare_zeroshot_paired")
    rl = read("compare_ruler")
    parts = []
    small = ((zs is not None and len(zs) and int(zs["n"].min()) < MIN_ZEROSHOT_ITEMS)
             or (rl is not None and len(rl) and int(rl["n"].min()) < MIN_RULER_SAMPLES))
    p_base = PAPER.get(("zeroshot", "unedited", "acc"))
    if paired is not None and len(paired):
        acc = paired[(paired["metric"] == "acc") & paired["condition"].str.endswith(" s_par=0")]
        if len(acc):
            def paper_delta(c: str) -> str:
                pv = PAPER.get(("zeroshot", c, "acc"))
                return f"; paper {_signed(pv - p_base, 3)}" if pv is not None and p_base is not None else ""

            parts.append(
                f"zero-shot accuracy change vs unedited over {int(acc['n'].iloc[0])} items, "
                + ", ".join(f"{_site_of(c)} {_signed(d, 2)} points (CI {_signed(lo, 2)} to {_signed(hi, 2)}"
                            f"{paper_delta(c)})"
                            for c, d, lo, hi in zip(acc["condition"], acc["delta"], acc["ci_low"], acc["ci_high"])))
    conds = [r for (t, r, q) in PAPER if t == "ruler" and ("ruler", r, "score") in val]
    if conds:
        parts.append("RULER-style score " + ", ".join(
            f"{c.replace(' s_par=', ' at ')} {_num(val[('ruler', c, 'score')], 3)} % "
            f"(paper {PAPER[('ruler', c, 'score')]:.2f})" for c in conds))
    if parts:
        sentences.append("Downstream" + (" (indication only at these budgets)" if small else "") + ": "
                         + "; ".join(parts) + f" — paper models: {PAPER_ZEROSHOT_MODEL} (zero-shot), "
                         f"{PAPER_RULER_MODEL} (RULER).")

    # 5. the post-W_O audit
    if ("audit", "value_excl_self", "perturbation %") in val and ("audit", "attn", "perturbation %") in val:
        e = {q: val[("audit", "value_excl_self", f"{q} %")] for q in ("perturbation", "energy", "retained")}
        r = {q: val[("audit", "attn", f"{q} %")] for q in ("perturbation", "energy", "retained")}
        more = e["perturbation"] > r["perturbation"]
        sentences.append(
            f"Post-W_O audit (s_par = 0, all blocks): exclude-self removal perturbs the attention output by "
            f"{_num(e['perturbation'])} % (energy {_num(e['energy'])} %, retained {_num(e['retained'])} %), the "
            f"residual edit by {_num(r['perturbation'])} % ({_num(r['energy'])} %, {_num(r['retained'])} %); "
            f"paper ({PAPER_SMALL_MODEL}): {PAPER[('audit', 'value_excl_self', 'perturbation %')]:.2f} % and "
            f"{PAPER[('audit', 'attn', 'perturbation %')]:.2f} % — exclude-self perturbs "
            f"{'more, as in the paper' if more else 'less, unlike the paper'}.")

    # 6. the closed form: exact for the value-space variants, exact only along z for attn
    cf = read("closed_form_errors")
    if cf is not None and len(cf):
        exact = cf[cf["variant"].isin(["value_full", "value_excl_self"])]
        worst = float(exact["rel_err"].max()) if len(exact) else float("nan")
        logit = {v: val.get(("closed_form", v, "max abs dlogit")) for v in ("value_full", "value_excl_self")}
        text = ("Closed form: editing only the attention diagonal reproduces the value-space edits " +
                ("up to float rounding" if worst < 1e-3 else "NOT exactly") +
                f" (largest relative error {_num(worst, 2)}; max |Δlogit| " +
                " / ".join(f"{_num(x, 2)} {v.replace('value_', '')}" for v, x in logit.items() if x is not None) + ")")
        dg = read("closed_form_diag")
        if dg is not None and (dg["variant"] == "attn").any():
            a = dg[dg["variant"] == "attn"].iloc[0]
            along_ok = a["resid_local_par_rel_err_max"] < 1e-3
            text += (f"; the residual (attn) one-coefficient form is {'exact' if along_ok else 'NOT exact'} along z "
                     f"(miss along z at most {_num(a['resid_local_par_rel_err_max'], 2)} of ||attn_out||) but "
                     f"misses by a median {_num(a['resid_local_rel_err_median'], 2)} ||attn_out|| off z, as expected")
        sentences.append(text + ".")

    # 7. the MLP carrier
    labels = ("residual mlp", "h vs x", "y_g vs h_g")
    if all(("mlp_carrier", l, r) in val for l in labels for r in ("no_para", "no_perp")):
        para = [val[("mlp_carrier", l, "no_para")] for l in labels]
        perp = [val[("mlp_carrier", l, "no_perp")] for l in labels]
        carrier = all(q > p for p, q in zip(para, perp))

        def ratio(p: float, q: float) -> str:
            return f"×{_num(q / p, 2)}" if p > 0 else "n/a"

        paper = [(PAPER[("mlp_carrier", l, "no_para")], PAPER[("mlp_carrier", l, "no_perp")]) for l in labels]
        sentences.append(
            "MLP carrier (Δ mean NLL, nats; residual MLP / h vs x / y_g vs h_g): No-Para " +
            " / ".join(_signed(x) for x in para) + ", No-Perp " + " / ".join(_signed(x) for x in perp) +
            f" (paper, {PAPER_SMALL_MODEL}: " + " / ".join(f"+{p:g}" for p, _ in paper) + " and " +
            " / ".join(f"+{q:g}" for _, q in paper) + "); No-Perp is " +
            " / ".join(ratio(p, q) for p, q in zip(para, perp)) + " No-Para (paper " +
            " / ".join(ratio(p, q) for p, q in paper) + ")" +
            (", so the perpendicular part carries the MLP, as in the paper." if carrier else
             ", so the perpendicular part does not carry the MLP everywhere, unlike the paper."))

    # 8. heads
    ha, hs = read("heads_alpha"), read("heads_sensitivity")
    if ha is not None and len(ha):
        pos, n = int((ha["alpha_mean"] > 0).sum()), len(ha)
        text = (f"Heads: {_num(100 * pos / n, 3)} % of heads ({pos} of {n}) have a positive mean exclude-self alpha "
                f"(paper: {PAPER[('heads', 'value_excl_self', 'share alpha > 0')]}"
                f"{'' if 0 < pos < n and min(pos, n - pos) >= 0.1 * n else '; here almost one sign'})")
        if hs is not None and len(hs):
            single = hs[hs["head"].astype(str) != "all"]
            sig = single[single["q"] < 0.05]
            big = single.loc[single["delta_loss"].idxmax()]
            text += (f"; {len(sig)} of {len(single)} single-head removals change the loss at BH q < 0.05 "
                     f"(largest {_signed(big['delta_loss'], 2)} nats, layer {int(big['layer'])} head {big['head']})")
        sentences.append(text + ".")

    # warnings: budgets too small to conclude from
    if zs is not None and len(zs):
        n = int(zs["n"].min())
        if n < MIN_ZEROSHOT_ITEMS:
            tasks = list(dict.fromkeys(zs["task"]))
            base = zs[zs["condition"] == "unedited"] if "condition" in zs else zs
            p = float(base["acc"].mean()) if len(base) else 0.5
            se = 100 * math.sqrt(max(p * (1 - p), 1e-4) / (n * len(tasks)))
            warnings.append(f"Zero-shot: {n} items per task ({n * len(tasks)} per condition over {len(tasks)} "
                            f"task{'s' if len(tasks) > 1 else ''}): one item moves a task's accuracy by {100 / n:.0f} points and the mean "
                            f"accuracy has a standard error of about ±{se:.0f} points — indication only "
                            f"(use at least {MIN_ZEROSHOT_ITEMS} items per task).")
    if rl is not None and len(rl):
        n = int(rl["n"].min())
        if n < MIN_RULER_SAMPLES:
            warnings.append(f"RULER-style: {n} sample(s) per task and length: each score moves in steps of "
                            f"{100 / n:.0f} points — indication only (use at least {MIN_RULER_SAMPLES}).")
    if hs is not None and len(hs):
        n = int(hs["n_texts"].min())
        if n < MIN_HEAD_TEXTS:
            warnings.append(f"Head sensitivity: {n} texts per head: the sign-flip p of one head cannot fall below "
                            f"{_num(2.0 ** (1 - n), 2)}, so few single-head effects can pass Benjamini–Hochberg over "
                            f"{len(hs)} tests — indication only (use at least {MIN_HEAD_TEXTS} texts).")
    if (cp := read("compare_ppl")) is not None and len(cp):
        n = int(cp["n_tokens"].iloc[0])
        if n < MIN_PPL_TOKENS:
            warnings.append(f"Perplexity: {n} tokens of {corpus}: large ΔPPL differences stand, but differences "
                            f"of a point or two are an indication only (use at least {MIN_PPL_TOKENS} tokens).")
    return Headline(sentences, warnings)
