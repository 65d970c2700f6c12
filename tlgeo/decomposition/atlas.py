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

Defaults are sized for a small model on a CPU (minutes, not hours); every budget is a
flag of ``tlgeo atlas``, and those that drive the run time carry a ``cost``: what the
time grows with (``tlgeo plan atlas`` estimates it on a device). Measured times:
``results/atlas-smollm2-135m/timings.csv`` and ``results/bench-atlas/`` (docs/atlas.md).

The report opens with :func:`tlgeo.decomposition.summary.headline`: a few
sentences of what this model shows next to the paper, computed from the CSVs,
and warnings where a budget is too small to conclude anything (those tables
also say "indication only").
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..errors import InputError
from ..runner.analysis import StepContext, atlas_budgets, register_analysis_step, register_chapter
from ..models import Model
from .analysis import AUDIT, CLOSED_FORM, COMPARE, HEADS, MLP_CARRIER, PROFILE, SWEEPS, ProfileResult
from .config import (
    AuditConfig,
    ClosedFormConfig,
    CompareConfig,
    DecompositionConfig,
    HeadsConfig,
    MlpCarrierConfig,
    ProfileConfig,
    SweepsConfig,
)
from .experiments import AuditResult, ClosedFormResult, CompareResult, HeadsResult, MlpCarrierResult, SweepsResult
from .mlp_carrier import carrier_table_wide
from .paper import PAPER, PAPER_PROFILE_MODEL, PAPER_RULER_MODEL, PAPER_SMALL_MODEL, PAPER_ZEROSHOT_MODEL
from .plots import attention_view_signed, plot_diagonal, plot_head_maps, plot_profile, plot_sweep
from .summary import (
    CHAPTER,
    MIN_HEAD_TEXTS,
    MIN_PPL_TOKENS,
    MIN_RULER_SAMPLES,
    MIN_ZEROSHOT_ITEMS,
    atlas_summary,
    headline,
    indication_note,
    paper_value,
)

__all__ = ["CHAPTER", "DecompositionBudgets", "PAPER", "atlas_summary", "headline"]


# Every budget is a field of one of the experiments' configs (its help, cost and atlas default are the
# field's), named decomposition_<name> (flag --decomposition-<name>) as every chapter's budgets are named after
# their chapter: skip_first, context and profile_tokens of the main job's; sweep_tokens (it sizes every sweep
# point and comparison condition), the grids of the sweeps'; the compared sites and scales, zero-shot and
# RULER of the comparison's; heads_* and n_perm of the heads'; mlp_carrier_tokens and closed_form_tokens of
# theirs. Each step's config is made from them below.
_Main = atlas_budgets(DecompositionConfig, "decomposition_", ("skip_first", "context", "profile_tokens"))
_Sweeps = atlas_budgets(
    SweepsConfig,
    "decomposition_",
    ("tokens", "s_par_grid", "s_perp_grid"),
    rename={"tokens": "sweep_tokens"},
)
_Compare = atlas_budgets(
    CompareConfig,
    "decomposition_",
    (
        "sites",
        "scales",
        "zeroshot_tasks",
        "zeroshot_scales",
        "zeroshot_limit",
        "ruler_tasks",
        "ruler_sites",
        "ruler_lengths",
        "ruler_samples",
        "ruler_template",
    ),
    rename={"sites": "compare_sites", "scales": "compare_scales"},
)
_Heads = atlas_budgets(HeadsConfig, "decomposition_heads_", ("texts", "length", "layers"))
_HeadStats = atlas_budgets(HeadsConfig, "decomposition_", ("n_perm",))
_MlpCarrier = atlas_budgets(MlpCarrierConfig, "decomposition_mlp_carrier_", ("tokens",))
_ClosedForm = atlas_budgets(ClosedFormConfig, "decomposition_closed_form_", ("tokens",))


@dataclass
class DecompositionBudgets(_ClosedForm, _MlpCarrier, _HeadStats, _Heads, _Compare, _Sweeps, _Main):
    """Budgets of the directional-decomposition steps (tokens, tasks, lengths, resamples), each a field of
    one experiment's config; ``<step>_config()`` gives that step's config, ``config(**fixed)`` the main
    job's (:class:`~.config.DecompositionConfig`)."""

    config = _Main.config

    def check(self, model: Model) -> None:
        """Fail before any work when a budget does not fit ``model``."""
        if self.decomposition_context > model.cfg.n_ctx:
            raise InputError(f"context {self.decomposition_context} exceeds the model's n_ctx {model.cfg.n_ctx}")

    def profile_config(self) -> ProfileConfig:
        return ProfileConfig(tokens=self.decomposition_profile_tokens, seq_len=self.decomposition_context)

    def sweeps_config(self) -> SweepsConfig:
        return _Sweeps.config(self, context=self.decomposition_context, skip_first=self.decomposition_skip_first)

    def compare_config(self, seed: int = 0) -> CompareConfig:
        return _Compare.config(
            self,
            tokens=self.decomposition_sweep_tokens,
            context=self.decomposition_context,
            skip_first=self.decomposition_skip_first,
            seed=seed,
        )

    def heads_config(self, seed: int = 0) -> HeadsConfig:
        return _Heads.config(
            self, n_perm=self.decomposition_n_perm, skip_first=self.decomposition_skip_first, seed=seed
        )

    def mlp_carrier_config(self) -> MlpCarrierConfig:
        return _MlpCarrier.config(self, context=self.decomposition_context, skip_first=self.decomposition_skip_first)

    def closed_form_config(self) -> ClosedFormConfig:
        return _ClosedForm.config(self, skip_first=self.decomposition_skip_first)

    def audit_config(self) -> AuditConfig:
        n = min(self.decomposition_context, 256)  # four windows of at most 256 tokens
        return AuditConfig(tokens=4 * n, context=n, skip_first=self.decomposition_skip_first)


register_chapter(CHAPTER, DecompositionBudgets, headline=headline, title="Directional decomposition (seed paper 000)")


@register_analysis_step(
    "profile",
    CHAPTER,
    PROFILE,
    DecompositionBudgets.profile_config,
    "parallel ratios per layer and site (Figure 1 analogue)",
)
def _profile_section(ctx: StepContext, result: ProfileResult) -> None:
    b, summary = ctx.budget, result.profile_summary
    if summary is None:
        return
    ctx.report.section(
        "How parallel are the updates? (Figure 1 analogue)",
        "Per layer and site: the median over tokens of the parallel ratio |alpha| ||r|| / ||y_perp|| "
        "of the update y against its reference r (position 0, the attention sink, left out). A ratio "
        "above 1 means the update is mostly a rescaling of its reference; the paper's Figure 1 "
        f"({PAPER_PROFILE_MODEL}) has the parallel part dominating.",
    )
    ctx.report.figure(
        plot_profile(summary),
        f"Median parallel ratio per layer (x, integer block index) for each site (one line each, "
        f"log y axis), {b.decomposition_profile_tokens} tokens. Points above the dashed line at 1 are layers where "
        "the parallel part of the update is larger than the perpendicular part.",
    )
    wide = summary.pivot(index="layer", columns="site", values="parallel_ratio_median").reset_index()
    ctx.report.table(
        wide,
        "Median parallel ratio per layer (rows) and site (columns), the numbers of the figure "
        "above; > 1: parallel part dominates.",
    )


@register_analysis_step(
    "sweeps",
    CHAPTER,
    SWEEPS,
    DecompositionBudgets.sweeps_config,
    "ΔPPL over the s_par and s_perp grids at every site (Figure 3)",
)
def _sweeps_section(ctx: StepContext, result: SweepsResult) -> None:
    b, df = ctx.budget, result.sweeps
    base = float((df["ppl"] - df["delta_ppl"]).median())  # the unedited perplexity (every row knows it)
    few = (
        f" Only {b.decomposition_sweep_tokens} tokens: differences of a point or two are an indication only."
        if b.decomposition_sweep_tokens < MIN_PPL_TOKENS
        else ""
    )
    ctx.report.section(
        "Sensitivity sweeps (Figure 3)",
        f"Perplexity on {ctx.cfg.corpus} ({b.decomposition_sweep_tokens} tokens, context "
        f"{b.decomposition_context}) with the "
        f"parallel part (s_par) or the perpendicular part (s_perp) of every site scaled in blocks "
        f"{b.decomposition_skip_first}..; unedited perplexity {base:.2f}." + few,
    )
    ctx.report.figure(
        plot_sweep(df),
        "ΔPPL against the scale, left: s_par (s_perp = 1), right: s_perp (s_par = 1); one line per "
        "site, each through the unedited model (scale 1, ΔPPL 0, where the dashed lines cross; "
        "hollow where the grid has no scale 1: not run, a scale of 1 edits nothing); 0 removes that "
        "part, "
        "values above 1 amplify it. The y axis is symmetric-log when ΔPPL spans decades: a site "
        "whose line stays near 0 tolerates the edit.",
    )
    wide = df.pivot_table(index=["axis", "site"], columns="scale", values="ppl").reset_index()
    wide.columns = [c if isinstance(c, str) else f"{c:g}" for c in wide.columns]
    ctx.report.table(
        wide,
        f"Perplexity (not ΔPPL) at each scale (columns) per axis and site (rows); unedited "
        f"perplexity {base:.2f}, so a value near it means the edit costs nothing.",
    )


def _compare_text(b, has_ruler: bool) -> str:
    """The compare section's opening paragraph: what was run, and why RULER was not when it was not."""
    why = (
        "the atlas runs no RULER task unless asked (--decomposition-ruler-tasks niah_single,vt "
        "--decomposition-ruler-samples 10 or "
        "more): the one or two samples per condition an atlas can afford decide nothing"
        if not b.decomposition_ruler_tasks
        else f"no length of {list(b.decomposition_ruler_lengths)} fits the model's context"
        if b.decomposition_ruler_lengths
        else "no length was given"
    )
    ruler = (
        f", and RULER-style score (unedited and {', '.join(b.decomposition_ruler_sites) or 'no site'}) over "
        f"{', '.join(b.decomposition_ruler_tasks)} at {list(b.decomposition_ruler_lengths)} tokens "
        f"({b.decomposition_ruler_samples} samples each, "
        f"{b.decomposition_ruler_template} prompts, %)"
        if has_ruler
        else ""
    )
    return (
        f"Each site's parallel part scaled by s_par in {list(b.decomposition_compare_scales)} in blocks "
        f"{b.decomposition_skip_first}..: perplexity ({b.decomposition_sweep_tokens} tokens) and zero-shot "
        "accuracy (unedited "
        f"and s_par in {list(b.decomposition_zeroshot_scales)}) averaged over "
        f"{', '.join(b.decomposition_zeroshot_tasks) or 'no tasks'} (first {b.decomposition_zeroshot_limit} "
        "items each, %)"
        f"{ruler}. The paper's columns: zero-shot of {PAPER_ZEROSHOT_MODEL}"
        + (f", RULER of {PAPER_RULER_MODEL}" if has_ruler else "")
        + " — other models and budgets, so compare orderings, not values."
        + ("" if has_ruler else f" RULER was not run: {why}.")
    )


def _compare_shown(table: pd.DataFrame, has_ruler: bool, zs_note: str, rl_note: str) -> pd.DataFrame:
    """The compare table as shown: one row per condition, the paper's columns beside ours."""
    shown = pd.DataFrame(
        {
            "condition": table["condition"],
            "PPL": table["ppl"],
            "ΔPPL": table["delta_ppl"],
            "zero-shot acc %" + zs_note: table["zeroshot_acc"],
            "paper zero-shot acc %": [paper_value(PAPER.get(("zeroshot", c, "acc"))) for c in table["condition"]],
            "zero-shot acc_norm %" + zs_note: table["zeroshot_acc_norm"],
            "RULER %" + rl_note: table["ruler"],
            "paper RULER %": [paper_value(PAPER.get(("ruler", c, "score"))) for c in table["condition"]],
        }
    )
    return shown if has_ruler else shown.drop(columns=["RULER %", "paper RULER %"])


def _zeroshot_tables(ctx: StepContext, zs: pd.DataFrame, zs_paired, zs_small: bool, n_zs: int | None) -> None:
    """The zero-shot tables: accuracy per task and condition, and the paired change against unedited."""
    if len(zs):
        order = list(dict.fromkeys(zs["condition"]))
        per_task = zs.pivot_table(index="condition", columns="task", values=["acc", "acc_norm"], sort=False) * 100
        per_task = per_task.reindex(order)
        per_task.columns = [f"{task} {metric} %" for metric, task in per_task.columns]
        per_task = per_task[[f"{t} {m} %" for t in dict.fromkeys(zs["task"]) for m in ("acc", "acc_norm")]]
        ctx.report.table(
            per_task.reset_index(),
            ("Indication only: " if zs_small else "")
            + f"zero-shot accuracy per task (%; {n_zs} items each; acc_norm: length-normalised "
            "log-likelihood), one row per condition.",
        )
    if zs_paired is not None and len(zs_paired):
        paired_shown = zs_paired[["condition", "metric", "delta", "ci_low", "ci_high", "p", "n"]].copy()
        paired_shown[["delta", "ci_low", "ci_high"]] = paired_shown[["delta", "ci_low", "ci_high"]].round(1)
        ctx.report.table(
            paired_shown.rename(columns={"delta": "Δ points", "ci_low": "CI low", "ci_high": "CI high"}),
            ("Indication only: " if zs_small else "")
            + "zero-shot change against the unedited model on the same items, pooled over tasks (percentage "
            "points; 95% bootstrap CI; sign-flip p). A CI that contains 0 is no evidence of a change.",
        )


def _ruler_table(ctx: StepContext, rl: pd.DataFrame, rl_small: bool, n_rl: int | None) -> None:
    """The RULER-style score per task and prompt length, one row per condition."""
    order = list(dict.fromkeys(rl["condition"]))
    cells = rl.assign(cell=[f"{t} @{int(n)} %" for t, n in zip(rl["task"], rl["length"])])
    per_cell = cells.pivot_table(index="condition", columns="cell", values="score", sort=False).reindex(order)
    per_cell.columns.name = None
    ctx.report.table(
        per_cell.reset_index(),
        ("Indication only: " if rl_small else "")
        + f"RULER-style long-context score per task and prompt length in tokens (%; {n_rl} "
        "samples each), one row per condition.",
    )


@register_analysis_step(
    "compare",
    CHAPTER,
    COMPARE,
    DecompositionBudgets.compare_config,
    "exclude-self vs full vs residual vs diagonal at s_par in {0, 0.5}: perplexity, zero-shot (RULER when asked)",
)
def _compare_section(ctx: StepContext, result: CompareResult) -> None:
    b, table = ctx.budget, result.compare
    empty_zs = pd.DataFrame(columns=["condition", "task", "n", "acc", "acc_norm"])
    zs = result.compare_zeroshot if result.compare_zeroshot is not None else empty_zs
    rl = (
        result.compare_ruler
        if result.compare_ruler is not None
        else pd.DataFrame(columns=["condition", "task", "length", "n", "score"])
    )
    n_zs = int(zs["n"].min()) if len(zs) else None
    n_rl = int(rl["n"].min()) if len(rl) else None
    zs_small = n_zs is not None and n_zs < MIN_ZEROSHOT_ITEMS
    rl_small = n_rl is not None and n_rl < MIN_RULER_SAMPLES
    zs_note, rl_note = (" (indication only)" if zs_small else ""), (" (indication only)" if rl_small else "")
    ctx.report.section("Which parallel removal is cheapest? (Tables 1, 2, 8)", _compare_text(b, bool(len(rl))))
    small = [
        f"zero-shot on {n_zs} items per task" if zs_small else "",
        f"RULER on {n_rl} samples per task and length" if rl_small else "",
    ]
    ctx.report.table(
        _compare_shown(table, bool(len(rl)), zs_note, rl_note),
        "One row per condition (site and s_par; unedited first). Lower ΔPPL and higher "
        "accuracy / score are better; the cheapest removal is the s_par = 0 row with the "
        "smallest ΔPPL. A dash: no paper number for that condition."
        + (f" Indication only: {' and '.join(x for x in small if x)}." if any(small) else ""),
    )
    _zeroshot_tables(ctx, zs, result.compare_zeroshot_paired, zs_small, n_zs)
    if len(rl):
        _ruler_table(ctx, rl, rl_small, n_rl)


@register_analysis_step(
    "heads", CHAPTER, HEADS, DecompositionBudgets.heads_config, "per-head alpha map and causal sensitivity (Figure 7)"
)
def _heads_section(ctx: StepContext, result: HeadsResult) -> None:
    b, alpha, sens = ctx.budget, result.heads_alpha, result.heads_sensitivity
    n_texts = int(sens["n_texts"].min()) if len(sens) else ctx.config.texts
    note = indication_note(n_texts, MIN_HEAD_TEXTS, "texts")
    ctx.report.section(
        "Heads (Figure 7)",
        f"Mean alpha of the exclude-self update per head ({ctx.config.texts} texts of {b.decomposition_heads_length} "
        "tokens), and the change of loss when its parallel part is removed in one head "
        f"(token-weighted sign-flip test, {b.decomposition_n_perm} permutations, and the interval that inverts it, "
        "excluding 0 exactly when p < 0.05; Benjamini–Hochberg q over the heads). The paper finds heads of both signs.",
    )
    ctx.report.figure(
        plot_head_maps(alpha, sens),
        "Left: mean alpha per layer (rows) and head (columns): red > 0 (the message from the other "
        "tokens points along the token's own value), blue < 0, white 0. Right: loss change (nats) when the "
        "parallel part is "
        "removed in that head only, for the probed layers; red: the head's parallel part helps, "
        "* marks q < 0.05." + (f" Indication only: {n_texts} texts." if note else ""),
    )
    top = sens[sens["head"].astype(str) != "all"].sort_values("delta_loss")
    cols = ["layer", "head", "delta_loss", "ci_low", "ci_high", "p", "q", "n_texts"]
    ctx.report.table(
        pd.concat([top.head(5), top.tail(5)])
        .drop_duplicates()[cols]
        .rename(columns={"delta_loss": "Δ loss (nats)", "ci_low": "CI low", "ci_high": "CI high"}),
        (f"Indication only ({n_texts} texts). " if note else "")
        + "The five least (top) and most (bottom) sensitive single heads: loss change when the head's parallel "
        "part is removed, 95% CI, sign-flip p and BH q over all heads and layers.",
    )


@register_analysis_step(
    "mlp_carrier",
    CHAPTER,
    MLP_CARRIER,
    DecompositionBudgets.mlp_carrier_config,
    "MLP carrier: No-Para vs No-Perp Δloss (Table 10)",
)
def _mlp_section(ctx: StepContext, result: MlpCarrierResult) -> None:
    b, df = ctx.budget, result.mlp_carrier
    ctx.report.section(
        "MLP carrier (Table 10)",
        "Mean NLL change when the parallel (No-Para) or perpendicular (No-Perp) part is removed "
        "at the residual MLP site, inside the MLP relative to its input (h vs x), and per "
        f"down-projection block (y_g vs h_g), in blocks {b.decomposition_skip_first}.. "
        f"({b.decomposition_mlp_carrier_tokens} tokens).",
    )
    wide = carrier_table_wide(df).reset_index()
    wide.columns.name = None
    for r in ("no_para", "no_perp"):
        wide[f"paper {r}"] = [
            paper_value(PAPER.get(("mlp_carrier", l, r))) if n in ("-", "include") else "—"
            for l, n in zip(wide["label"], wide["narrow"])
        ]
    ctx.report.table(
        wide,
        "Δ mean NLL (nats) against the unedited model, one row per site (narrow: the last, "
        "narrower down-projection block edited too, 'include', or left alone, 'skip'). "
        "The perpendicular part carries the MLP when No-Perp is far larger than No-Para. "
        f"Paper: {PAPER_SMALL_MODEL}.",
    )


_CF_EXPECTED = {
    "value_full": "exact (float rounding)",
    "value_excl_self": "exact (float rounding)",
    "attn": "exact only along z: expected to fail",
}


@register_analysis_step(
    "closed_form",
    CHAPTER,
    CLOSED_FORM,
    DecompositionBudgets.closed_form_config,
    "the diagonal closed form reproduces the value-space edit (Table 5, Figure 4)",
)
def _closed_form_section(ctx: StepContext, result: ClosedFormResult) -> None:
    from .closed_form import error_summary

    b, summary, diag, view = (
        ctx.budget,
        result.closed_form_diag,
        result.closed_form_tokens,
        result.closed_form_attention,
    )
    layer = (
        int(view["layer"].iloc[0]) if view is not None and len(view) else (int(diag["layer"].max()) + 1) // 2
    )  # n_layers // 2, as the run chose it
    ctx.report.section(
        "The diagonal closed form (Table 5, Figure 4)",
        "A value-space parallel edit changes only the attention diagonal: "
        "ΔA_tt = (s_par − 1)<o_t, v_t>/||v_t||² (c_t for exclude-self). Editing the pattern "
        "by this amount reproduces the edit. The residual-space (attn) form, one coefficient per "
        "token shared by all heads, matches the edit only along z = resid_pre, so its rows are "
        "expected to fail: that is the point of the comparison.",
    )
    errs = error_summary(result.closed_form_errors)
    errs.insert(1, "expected", [_CF_EXPECTED.get(v, "") for v in errs["variant"]])
    ctx.report.table(
        errs,
        f"Largest |closed form − edit| over blocks {b.decomposition_skip_first}.. at s_par = 0 "
        f"({b.decomposition_closed_form_tokens} tokens), per variant and quantity (z: per-head outputs, "
        "attn_out: after W_O, logits). rel_err: largest error norm over the RMS reference norm; "
        "value_full / value_excl_self are exact up to float rounding (~1e-6); the attn rows "
        "are expected to fail (exact only along z).",
    )
    ctx.report.table(
        summary.set_index("variant").T.rename_axis("quantity").reset_index(),
        by_row=True,
        caption=(
            "The attention diagonal A_tt before and after the closed-form edit (means, min, max over tokens past "
            "position 0, heads and blocks; one column per variant); share_negative: edited diagonals below 0 "
            "(the closed form does not renormalise rows). attn only: resid_local_rel_err, the edit's miss off z "
            "relative to ||attn_out|| (large: expected), and resid_local_par_rel_err, its miss along z (~0: "
            "exact there)."
        ),
    )
    ctx.report.figure(
        plot_diagonal(diag, "value_excl_self", layer, head=0),
        f"A_tt of block {layer}, head 0, per position t (x): top the original diagonal weight, "
        "bottom after the exclude-self closed-form edit at s_par = 0 (one colour scale, white = 0; "
        "blue: negative weights, which the edit allows).",
    )
    if view is not None and len(view):
        heads = sorted({v.split()[0][1:] for v in view["view"]}, key=int)
        ctx.report.circuitsvis(
            attention_view_signed(view),
            f"Block {int(view['layer'].iloc[0])}, heads {', '.join(heads)}: the attention pattern "
            f"before and after the exclude-self closed-form edit at s_par = {ctx.config.s_par:g} "
            "(pick a head to view; only the diagonal differs).",
        )


def _paper_audit(site: str) -> str:
    """``25.15% / 9.32% / 95.01%``: the paper's perturbation / energy / retained of ``site``."""
    return " / ".join(f"{PAPER[('audit', site, f'{q} %')]:.2f}%" for q in ("perturbation", "energy", "retained"))


@register_analysis_step(
    "audit",
    CHAPTER,
    AUDIT,
    DecompositionBudgets.audit_config,
    "post-W_O perturbation / energy / retained norm (Table 6)",
)
def _audit_section(ctx: StepContext, result: AuditResult) -> None:
    overall = result.audit
    ctx.report.section(
        "Post-W_O audit (Table 6)",
        "At s_par = 0, all blocks edited: ||y~ − y||/||y|| (perturbation), its square (energy) and "
        "||y~||/||y|| (retained) of the attention output after W_O, per token, averaged over tokens "
        f"and blocks. {PAPER_SMALL_MODEL} in the paper: residual attention {_paper_audit('attn')}; "
        f"exclude-self {_paper_audit('value_excl_self')}.",
    )
    shown = pd.DataFrame({"site": overall["site"]})
    for q in ("perturbation", "energy", "retained"):
        shown[f"{q} %"] = 100 * overall[f"{q}_mean"]
        shown[f"paper {q} %"] = [paper_value(PAPER.get(("audit", site, f"{q} %"))) for site in overall["site"]]
    ctx.report.table(
        shown,
        f"In % like the paper ({PAPER_SMALL_MODEL}): the token-weighted mean of the per-token "
        f"ratios over {int(overall['n_layers'].max())} edited blocks, next to the paper's value. "
        "A larger perturbation for exclude-self than for the residual edit (attn) is the "
        "paper's point: the exclude-self parallel part is a larger share of the output.",
    )
    pooled = pd.DataFrame(
        {
            "site": overall["site"],
            **{f"pooled {q} %": 100 * overall[f"{q}_pooled"] for q in ("perturbation", "energy", "retained")},
        }
    )
    ctx.report.table(
        pooled,
        "The same ratios pooled (sums over tokens and blocks before dividing, %): "
        "dominated by the tokens with the largest outputs.",
    )
