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
of ``tlgeo atlas``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..evals.ruler import evaluate_ruler
from ..evals.zeroshot import evaluate_zeroshot, paired_accuracy_change
from ..hooks.edits import Edit
from ..pipeline import StepContext, budget, register_family, register_step
from .audit import audit_overall, post_wo_audit
from .closed_form import attention_before_after, closed_form_check, diag_summary, plot_diagonal
from .compare import compare_edits
from .heads import head_alpha_map, head_sensitivity, plot_head_maps
from .mlp_carrier import carrier_table_wide, mlp_carrier_table
from .observe import corpus_batches, parallel_profile, plot_profile, summarize_profile
from .sweeps import plot_sweep, sensitivity_sweep

__all__ = ["FAMILY", "DecompositionBudgets", "PAPER", "atlas_summary"]

FAMILY = "decomposition"


@dataclass
class DecompositionBudgets:
    """Budgets of the directional-decomposition steps (tokens, tasks, lengths, resamples)."""

    skip_first: int = budget(1, "leave the first n blocks unedited (the reference code: 1)")
    context: int = budget(256, "tokens per window for perplexity, sweeps and the MLP carrier")
    profile_tokens: int = budget(512, "tokens profiled (profile step)")
    sweep_tokens: int = budget(512, "tokens scored per sweep point and comparison condition", flag="--tokens")
    s_par_grid: tuple[float, ...] = budget((-1.0, 0.0, 0.5, 1.5, 3.0), "s_par values swept", item=float)
    s_perp_grid: tuple[float, ...] = budget((0.0, 0.5, 1.5), "s_perp values swept", item=float)
    compare_sites: tuple[str, ...] = budget(("value_excl_self", "value_full", "attn", "diag"),
                                            "sites compared", item=str)
    compare_scales: tuple[float, ...] = budget((0.0, 0.5), "s_par values compared", item=float)
    zeroshot_tasks: tuple[str, ...] = budget(("piqa", "arc_easy", "winogrande"),
                                             "zero-shot tasks (piqa,arc_easy,arc_challenge,openbookqa,winogrande,boolq)",
                                             item=str)
    zeroshot_limit: int = budget(20, "first n items of each zero-shot task")
    ruler_tasks: tuple[str, ...] = budget(("niah_single", "vt"), "RULER-style tasks", item=str)
    ruler_lengths: tuple[int, ...] = budget((1024,), "RULER prompt lengths in tokens, e.g. 1024,2048,4096", item=int)
    ruler_samples: int = budget(2, "RULER samples per task and length")
    ruler_template: str = budget("base", "RULER prompts as raw text (base) or in the tokenizer's chat template",
                                 choices=("base", "chat"))
    head_texts: int = budget(8, "texts for the head maps")
    head_len: int = budget(128, "tokens per head-map text")
    head_layers: tuple[int, ...] | None = budget(None, "blocks of the head sensitivity map (default: every "
                                                 "6th block after skip_first)", item=int)
    n_boot: int = budget(1000, "bootstrap resamples of the head sensitivity CIs")
    n_perm: int = budget(2000, "sign-flip permutations of the head sensitivity tests")
    mlp_tokens: int = budget(512, "tokens scored by the MLP carrier step")
    closed_form_tokens: int = budget(64, "tokens of the closed-form check")

    def check(self, model) -> None:
        """Fail before any work when a budget does not fit ``model``."""
        if self.context > model.cfg.n_ctx:
            raise ValueError(f"context {self.context} exceeds the model's n_ctx {model.cfg.n_ctx}")


register_family(FAMILY, DecompositionBudgets)


@register_step("profile", FAMILY, ("profile_summary",),
               "parallel ratios per layer and site (Figure 1 analogue)")
def _step_profile(ctx: StepContext) -> None:
    b = ctx.budget
    summary = ctx.cached("profile_summary", lambda: summarize_profile(parallel_profile(
        ctx.model, ctx.text, seq_len=min(b.context, ctx.model.cfg.n_ctx), max_tokens=b.profile_tokens)))
    ctx.report.section("1. How parallel are the updates? (Figure 1 analogue)",
                       "Per layer and site: median over tokens of |alpha| ||r|| / ||y_perp|| "
                       "(> 1: the update is mostly a rescaling of its reference). Position 0 left out.")
    ctx.report.figure(plot_profile(summary), "median parallel ratio per layer")
    wide = summary.pivot(index="layer", columns="site", values="parallel_ratio_median").reset_index()
    ctx.report.table(wide, "median parallel ratio", digits=3)


@register_step("sweeps", FAMILY, ("sweeps",),
               "ΔPPL over the s_par and s_perp grids at every site (Figure 3)")
def _step_sweeps(ctx: StepContext) -> None:
    b = ctx.budget
    df = ctx.cached("sweeps", lambda: sensitivity_sweep(
        ctx.model, ctx.text, s_par_grid=b.s_par_grid, s_perp_grid=b.s_perp_grid,
        skip_first=b.skip_first, context=b.context, max_tokens=b.sweep_tokens,
        batch_size=max(1, 1024 // b.context), log_path=ctx.log("sweeps"), progress=True))
    ctx.report.section("2. Sensitivity sweeps (Figure 3)",
                       f"ΔPPL on {ctx.cfg.corpus} ({b.sweep_tokens} tokens, context {b.context}) "
                       f"with edits in blocks {b.skip_first}.. at every site.")
    ctx.report.figure(plot_sweep(df), "ΔPPL vs scale")
    wide = df.pivot_table(index=["axis", "site"], columns="scale", values="ppl").reset_index()
    wide.columns = [c if isinstance(c, str) else f"{c:g}" for c in wide.columns]
    ctx.report.table(wide, "perplexity at each scale (1 = unedited)")


def _compare_edits(b: DecompositionBudgets) -> list[Edit]:
    return [Edit(s, s_par=float(v), skip_first=b.skip_first) for s in b.compare_sites for v in b.compare_scales]


def _label(edit) -> str:
    return f"{edit.site.name} s_par={edit.s_par:g}"


@register_step("compare", FAMILY,
               ("compare_ppl", "compare_zeroshot", "compare_zeroshot_paired", "compare_ruler", "compare"),
               "exclude-self vs full vs residual vs diagonal at s_par in {0, 0.5}: perplexity, zero-shot, RULER")
def _step_compare(ctx: StepContext) -> None:
    b, model = ctx.budget, ctx.model
    edits = _compare_edits(b)
    ppl = ctx.cached("compare_ppl", lambda: compare_edits(
        model, ctx.text, edits, context=b.context, max_tokens=b.sweep_tokens,
        batch_size=max(1, 1024 // b.context), log_path=ctx.log("compare_ppl")))
    conditions = [("unedited", [])] + [(_label(e), e.hooks(model)) for e in edits]

    def zeroshot() -> pd.DataFrame:
        frames = [evaluate_zeroshot(model, b.zeroshot_tasks, limit=b.zeroshot_limit, fwd_hooks=hooks,
                                    tag=label, log_path=ctx.log("zeroshot")).assign(condition=label)
                  for label, hooks in conditions]
        return pd.concat(frames, ignore_index=True)

    def ruler() -> pd.DataFrame:
        lengths = [n for n in b.ruler_lengths if n <= model.cfg.n_ctx]
        if not lengths or not b.ruler_tasks:
            return pd.DataFrame(columns=["condition", "task", "length", "n", "score"])
        frames = [evaluate_ruler(model, b.ruler_tasks, lengths, b.ruler_samples, fwd_hooks=hooks,
                                 label=label, seed=ctx.cfg.seed, template=b.ruler_template,
                                 log_path=ctx.log("ruler")).assign(condition=label)
                  for label, hooks in conditions]
        return pd.concat(frames, ignore_index=True).drop(columns=["preds"], errors="ignore")

    def zeroshot_paired() -> pd.DataFrame:  # per-item results come back from the zero-shot log
        items = {label: evaluate_zeroshot(model, b.zeroshot_tasks, limit=b.zeroshot_limit, fwd_hooks=hooks,
                                          tag=label, log_path=ctx.log("zeroshot"), return_items=True)[1]
                 for label, hooks in conditions}
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
    ctx.report.section("3. Which parallel removal is cheapest? (Tables 1, 2, 8)",
                       f"Perplexity ({b.sweep_tokens} tokens), zero-shot accuracy averaged over "
                       f"{', '.join(b.zeroshot_tasks)} (first {b.zeroshot_limit} items each, %), and "
                       f"RULER-style score over {', '.join(b.ruler_tasks)} at {list(b.ruler_lengths)} tokens "
                       f"({b.ruler_samples} samples each, {b.ruler_template} prompts, %).")
    ctx.report.table(table, "edits in blocks %d.." % b.skip_first)
    ctx.report.table(zs[["condition", "task", "n", "acc", "acc_norm"]], "zero-shot per task")
    if zs_paired is not None:
        ctx.report.table(zs_paired[["condition", "metric", "delta", "ci_low", "ci_high", "p", "n"]],
                         "zero-shot change vs unedited, same items pooled over tasks (points; 95% bootstrap CI, "
                         "sign-flip p)")
    ctx.report.table(rl[[c for c in ("condition", "task", "length", "n", "score") if c in rl]], "long context per task")


def _head_layers(b: DecompositionBudgets, n_layers: int) -> list[int]:
    if b.head_layers is not None:
        return list(b.head_layers)
    return list(range(max(b.skip_first, 1), n_layers, 6))


@register_step("heads", FAMILY, ("heads_alpha", "heads_sensitivity"),
               "per-head alpha map and causal sensitivity (Figure 7)")
def _step_heads(ctx: StepContext) -> None:
    b, model = ctx.budget, ctx.model
    texts = corpus_batches(model, ctx.text, b.head_len, b.head_texts * b.head_len + 8)[: b.head_texts]
    alpha = ctx.cached("heads_alpha", lambda: head_alpha_map(model, texts))
    sens = ctx.cached("heads_sensitivity", lambda: head_sensitivity(
        model, texts, layers=_head_layers(b, model.cfg.n_layers), n_boot=b.n_boot, n_perm=b.n_perm,
        seed=ctx.cfg.seed, log_path=ctx.log("heads_sensitivity")))
    ctx.report.section("4. Heads (Figure 7)",
                       f"Mean alpha of the exclude-self update per head ({len(texts)} texts of {b.head_len} "
                       "tokens), and the change of loss when its parallel part is removed in one head "
                       f"(token-weighted bootstrap CI, {b.n_boot} resamples; sign-flip test, {b.n_perm} "
                       "permutations; Benjamini–Hochberg q; * marks q < 0.05).")
    ctx.report.figure(plot_head_maps(alpha, sens), "alpha map and sensitivity map")
    top = sens[sens["head"].astype(str) != "all"].sort_values("delta_loss")
    ctx.report.table(pd.concat([top.head(5), top.tail(5)]).drop_duplicates(), "least and most sensitive heads")


@register_step("mlp", FAMILY, ("mlp_carrier",),
               "MLP carrier: No-Para vs No-Perp Δloss (Table 10)")
def _step_mlp(ctx: StepContext) -> None:
    b = ctx.budget
    df = ctx.cached("mlp_carrier", lambda: mlp_carrier_table(
        ctx.model, ctx.text, max_tokens=b.mlp_tokens, context=b.context, skip_first=b.skip_first,
        batch_size=max(1, 1024 // b.context), log_path=ctx.log("mlp_carrier")))
    ctx.report.section("5. MLP carrier (Table 10)",
                       "Mean NLL change when the parallel (No-Para) or perpendicular (No-Perp) part is removed "
                       "at the residual MLP site, inside the MLP relative to its input (h vs x), and per "
                       "down-projection block (y_g vs h_g).")
    ctx.report.table(carrier_table_wide(df).reset_index(), "Δloss (nats)")


@register_step("closed_form", FAMILY, ("closed_form_errors", "closed_form_diag"),
               "the diagonal closed form reproduces the value-space edit (Table 5, Figure 4)")
def _step_closed_form(ctx: StepContext) -> None:
    b, model = ctx.budget, ctx.model
    tokens = corpus_batches(model, ctx.text, b.closed_form_tokens, b.closed_form_tokens + 8)[:1]
    res = closed_form_check(model, tokens, 0.0, skip_first=b.skip_first)
    res.errors.to_csv(ctx.csv("closed_form_errors"), index=False)
    summary = diag_summary(res.diag)
    summary.to_csv(ctx.csv("closed_form_diag"), index=False)
    layer = model.cfg.n_layers // 2
    ctx.report.section("6. The diagonal closed form (Table 5, Figure 4)",
                       "A value-space parallel edit changes only the attention diagonal: "
                       "ΔA_tt = (s_par − 1)<o_t, v_t>/||v_t||² (c_t for exclude-self). Editing the pattern "
                       "by this amount reproduces the edit; max errors below.")
    ctx.report.table(res.summary(), "largest |closed form − edit| over layers (s_par = 0)")
    ctx.report.table(summary, "diagonal before/after")
    ctx.report.figure(plot_diagonal(res.diag, "value_excl_self", layer, head=0),
                      f"A_tt of block {layer}, head 0: original vs closed-form edited (exclude-self, s_par = 0)")
    ctx.report.circuitsvis(attention_before_after(model, tokens, layer, "value_excl_self", 0.0, heads=[0, 1]),
                           f"block {layer}, heads 0–1 before/after the closed-form edit")


@register_step("audit", FAMILY, ("audit_layers", "audit"),
               "post-W_O perturbation / energy / retained norm (Table 6)")
def _step_audit(ctx: StepContext) -> None:
    b, model = ctx.budget, ctx.model
    tokens = corpus_batches(model, ctx.text, min(b.context, 256), 4 * 256 + 8)[:4]
    # mode "all": every block edited at once, one forward per site (as the edit is used)
    per_layer = ctx.cached("audit_layers", lambda: post_wo_audit(
        model, tokens, mode="all", skip_first=b.skip_first, log_path=ctx.log("audit")))
    overall = audit_overall(per_layer)
    overall.to_csv(ctx.csv("audit"), index=False)
    ctx.report.section("7. Post-W_O audit (Table 6)",
                       "At s_par = 0, all blocks edited: ||y~ − y||/||y|| (perturbation), its square (energy) and ||y~||/||y|| "
                       "(retained) of the attention output after W_O. Qwen3-0.6B in the paper: residual "
                       "attention 25.15% / 9.32% / 95.01%; exclude-self 49.10% / 25.89% / 83.36%.")
    ctx.report.table(overall, "overall (token-weighted)")


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
}


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
