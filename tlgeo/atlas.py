"""``tlgeo atlas``: the editing half of the paper on one model, as one HTML report.

Steps (each writes its CSV into the output directory as soon as it is done; a
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

Defaults are sized for a 2-core CPU (minutes, not hours); every budget is a flag.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

__all__ = ["AtlasConfig", "STEPS", "run_atlas", "atlas_summary", "PAPER"]

STEPS = ("profile", "sweeps", "compare", "heads", "mlp", "closed_form", "audit")


@dataclass
class AtlasConfig:
    """Budgets of every step (tokens, tasks, lengths) and where results go."""

    model: str = "smollm2-135m"
    corpus: str = "wikitext2"
    out: Path | None = None
    steps: tuple[str, ...] = STEPS
    skip_first: int = 1  # edits leave block 0 alone, as the reference code
    context: int = 256
    profile_tokens: int = 512
    sweep_tokens: int = 512
    s_par_grid: tuple[float, ...] = (-1.0, 0.0, 0.5, 1.5, 3.0)
    s_perp_grid: tuple[float, ...] = (0.0, 0.5, 1.5)
    compare_sites: tuple[str, ...] = ("value_excl_self", "value_full", "attn", "diag")
    compare_scales: tuple[float, ...] = (0.0, 0.5)
    zeroshot_tasks: tuple[str, ...] = ("piqa", "arc_easy", "winogrande")
    zeroshot_limit: int = 20
    ruler_tasks: tuple[str, ...] = ("niah_single", "vt")
    ruler_lengths: tuple[int, ...] = (1024,)
    ruler_samples: int = 2
    ruler_template: str = "base"  # "chat": the tokenizer's chat template (instruction-tuned models)
    head_texts: int = 8
    head_len: int = 128
    head_layers: tuple[int, ...] | None = None  # None: every 6th block after skip_first
    n_boot: int = 1000
    n_perm: int = 2000
    mlp_tokens: int = 512
    closed_form_tokens: int = 64
    seed: int = 0
    extra: dict = field(default_factory=dict)

    def out_dir(self) -> Path:
        return Path(self.out or Path("results") / f"atlas-{self.model.replace('/', '_').replace(':', '-')}")


class _Ctx:
    """What the steps share: model, text, output directory, report, timings."""

    def __init__(self, cfg: AtlasConfig, model, text: str, report):
        self.cfg, self.model, self.text, self.report = cfg, model, text, report
        self.out = cfg.out_dir()
        self.timings: dict[str, float] = {}

    def csv(self, name: str) -> Path:
        return self.out / f"{name}.csv"

    def log(self, name: str) -> Path:
        return self.out / "logs" / f"{name}.jsonl"

    def cached(self, name: str, compute: Callable[[], pd.DataFrame]) -> pd.DataFrame:
        """Load ``name.csv`` if a previous run finished it, else compute and save it."""
        path = self.csv(name)
        if path.exists():
            return pd.read_csv(path)
        df = compute()
        df.to_csv(path, index=False)
        return df


def _step_profile(ctx: _Ctx) -> None:
    from .observe import parallel_profile, summarize_profile
    from .plots import plot_profile

    cfg = ctx.cfg
    summary = ctx.cached("profile_summary", lambda: summarize_profile(parallel_profile(
        ctx.model, ctx.text, seq_len=min(cfg.context, ctx.model.cfg.n_ctx), max_tokens=cfg.profile_tokens)))
    ctx.report.section("1. How parallel are the updates? (Figure 1 analogue)",
                       "Per layer and site: median over tokens of |alpha| ||r|| / ||y_perp|| "
                       "(> 1: the update is mostly a rescaling of its reference). Position 0 left out.")
    ctx.report.figure(plot_profile(summary), "median parallel ratio per layer")
    wide = summary.pivot(index="layer", columns="site", values="parallel_ratio_median").reset_index()
    ctx.report.table(wide, "median parallel ratio", digits=3)


def _step_sweeps(ctx: _Ctx) -> None:
    from .sweeps import plot_sweep, sensitivity_sweep

    cfg = ctx.cfg
    df = ctx.cached("sweeps", lambda: sensitivity_sweep(
        ctx.model, ctx.text, s_par_grid=cfg.s_par_grid, s_perp_grid=cfg.s_perp_grid,
        skip_first=cfg.skip_first, context=cfg.context, max_tokens=cfg.sweep_tokens,
        batch_size=max(1, 1024 // cfg.context), log_path=ctx.log("sweeps"), progress=True))
    ctx.report.section("2. Sensitivity sweeps (Figure 3)",
                       f"ΔPPL on {cfg.corpus} ({cfg.sweep_tokens} tokens, context {cfg.context}) "
                       f"with edits in blocks {cfg.skip_first}.. at every site.")
    ctx.report.figure(plot_sweep(df), "ΔPPL vs scale")
    wide = df.pivot_table(index=["axis", "site"], columns="scale", values="ppl").reset_index()
    wide.columns = [c if isinstance(c, str) else f"{c:g}" for c in wide.columns]
    ctx.report.table(wide, "perplexity at each scale (1 = unedited)")


def _compare_edits(cfg: AtlasConfig):
    from .edits import Edit

    return [Edit(s, s_par=float(v), skip_first=cfg.skip_first) for s in cfg.compare_sites for v in cfg.compare_scales]


def _label(edit) -> str:
    return f"{edit.site.name} s_par={edit.s_par:g}"


def _step_compare(ctx: _Ctx) -> None:
    from .compare import compare_edits
    from .ruler import evaluate_ruler
    from .zeroshot import evaluate_zeroshot, paired_accuracy_change

    cfg, model = ctx.cfg, ctx.model
    edits = _compare_edits(cfg)
    ppl = ctx.cached("compare_ppl", lambda: compare_edits(
        model, ctx.text, edits, context=cfg.context, max_tokens=cfg.sweep_tokens,
        batch_size=max(1, 1024 // cfg.context), log_path=ctx.log("compare_ppl")))
    conditions = [("unedited", [])] + [(_label(e), e.hooks(model)) for e in edits]

    def zeroshot() -> pd.DataFrame:
        frames = [evaluate_zeroshot(model, cfg.zeroshot_tasks, limit=cfg.zeroshot_limit, fwd_hooks=hooks,
                                    tag=label, log_path=ctx.log("zeroshot")).assign(condition=label)
                  for label, hooks in conditions]
        return pd.concat(frames, ignore_index=True)

    def ruler() -> pd.DataFrame:
        lengths = [n for n in cfg.ruler_lengths if n <= model.cfg.n_ctx]
        if not lengths or not cfg.ruler_tasks:
            return pd.DataFrame(columns=["condition", "task", "length", "n", "score"])
        frames = [evaluate_ruler(model, cfg.ruler_tasks, lengths, cfg.ruler_samples, fwd_hooks=hooks,
                                 label=label, seed=cfg.seed, template=cfg.ruler_template,
                                 log_path=ctx.log("ruler")).assign(condition=label)
                  for label, hooks in conditions]
        return pd.concat(frames, ignore_index=True).drop(columns=["preds"], errors="ignore")

    def zeroshot_paired() -> pd.DataFrame:  # per-item results come back from the zero-shot log
        items = {label: evaluate_zeroshot(model, cfg.zeroshot_tasks, limit=cfg.zeroshot_limit, fwd_hooks=hooks,
                                          tag=label, log_path=ctx.log("zeroshot"), return_items=True)[1]
                 for label, hooks in conditions}
        base = items.pop("unedited")
        return pd.concat([paired_accuracy_change(it, base, seed=cfg.seed).assign(condition=label)
                          for label, it in items.items()], ignore_index=True)

    zs = ctx.cached("compare_zeroshot", zeroshot) if cfg.zeroshot_tasks else pd.DataFrame(
        columns=["condition", "task", "n", "acc", "acc_norm"])
    zs_paired = ctx.cached("compare_zeroshot_paired", zeroshot_paired) if cfg.zeroshot_tasks else None
    rl = ctx.cached("compare_ruler", ruler)
    ppl = ppl.assign(condition=["unedited"] + [_label(e) for e in edits])
    table = ppl[["condition", "ppl", "delta_ppl"]].merge(
        zs.groupby("condition", sort=False)[["acc", "acc_norm"]].mean().mul(100).add_prefix("zeroshot_").reset_index(),
        on="condition", how="left",
    ).merge(rl.groupby("condition", sort=False)["score"].mean().rename("ruler").reset_index(), on="condition", how="left")
    table.to_csv(ctx.csv("compare"), index=False)
    ctx.report.section("3. Which parallel removal is cheapest? (Tables 1, 2, 8)",
                       f"Perplexity ({cfg.sweep_tokens} tokens), zero-shot accuracy averaged over "
                       f"{', '.join(cfg.zeroshot_tasks)} (first {cfg.zeroshot_limit} items each, %), and "
                       f"RULER-style score over {', '.join(cfg.ruler_tasks)} at {list(cfg.ruler_lengths)} tokens "
                       f"({cfg.ruler_samples} samples each, {cfg.ruler_template} prompts, %).")
    ctx.report.table(table, "edits in blocks %d.." % cfg.skip_first)
    ctx.report.table(zs[["condition", "task", "n", "acc", "acc_norm"]], "zero-shot per task")
    if zs_paired is not None:
        ctx.report.table(zs_paired[["condition", "metric", "delta", "ci_low", "ci_high", "p", "n"]],
                         "zero-shot change vs unedited, same items pooled over tasks (points; 95% bootstrap CI, "
                         "sign-flip p)")
    ctx.report.table(rl[[c for c in ("condition", "task", "length", "n", "score") if c in rl]], "long context per task")


def _head_layers(cfg: AtlasConfig, n_layers: int) -> list[int]:
    if cfg.head_layers is not None:
        return list(cfg.head_layers)
    return list(range(max(cfg.skip_first, 1), n_layers, 6))


def _step_heads(ctx: _Ctx) -> None:
    from .heads import head_alpha_map, head_sensitivity, plot_head_maps
    from .observe import corpus_batches

    cfg, model = ctx.cfg, ctx.model
    texts = corpus_batches(model, ctx.text, cfg.head_len, cfg.head_texts * cfg.head_len + 8)[: cfg.head_texts]
    alpha = ctx.cached("heads_alpha", lambda: head_alpha_map(model, texts))
    sens = ctx.cached("heads_sensitivity", lambda: head_sensitivity(
        model, texts, layers=_head_layers(cfg, model.cfg.n_layers), n_boot=cfg.n_boot, n_perm=cfg.n_perm,
        seed=cfg.seed, log_path=ctx.log("heads_sensitivity")))
    ctx.report.section("4. Heads (Figure 7)",
                       f"Mean alpha of the exclude-self update per head ({len(texts)} texts of {cfg.head_len} "
                       "tokens), and the change of loss when its parallel part is removed in one head "
                       f"(token-weighted bootstrap CI, {cfg.n_boot} resamples; sign-flip test, {cfg.n_perm} "
                       "permutations; Benjamini–Hochberg q; * marks q < 0.05).")
    ctx.report.figure(plot_head_maps(alpha, sens), "alpha map and sensitivity map")
    top = sens[sens["head"].astype(str) != "all"].sort_values("delta_loss")
    ctx.report.table(pd.concat([top.head(5), top.tail(5)]).drop_duplicates(), "least and most sensitive heads")


def _step_mlp(ctx: _Ctx) -> None:
    from .mlp_carrier import carrier_table_wide, mlp_carrier_table

    cfg = ctx.cfg
    df = ctx.cached("mlp_carrier", lambda: mlp_carrier_table(
        ctx.model, ctx.text, max_tokens=cfg.mlp_tokens, context=cfg.context, skip_first=cfg.skip_first,
        batch_size=max(1, 1024 // cfg.context), log_path=ctx.log("mlp_carrier")))
    ctx.report.section("5. MLP carrier (Table 10)",
                       "Mean NLL change when the parallel (No-Para) or perpendicular (No-Perp) part is removed "
                       "at the residual MLP site, inside the MLP relative to its input (h vs x), and per "
                       "down-projection block (y_g vs h_g).")
    ctx.report.table(carrier_table_wide(df).reset_index(), "Δloss (nats)")


def _step_closed_form(ctx: _Ctx) -> None:
    from .closed_form import attention_before_after, closed_form_check, diag_summary, plot_diagonal
    from .observe import corpus_batches

    cfg, model = ctx.cfg, ctx.model
    tokens = corpus_batches(model, ctx.text, cfg.closed_form_tokens, cfg.closed_form_tokens + 8)[:1]
    res = closed_form_check(model, tokens, 0.0, skip_first=cfg.skip_first)
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


def _step_audit(ctx: _Ctx) -> None:
    from .audit import audit_overall, post_wo_audit
    from .observe import corpus_batches

    cfg, model = ctx.cfg, ctx.model
    tokens = corpus_batches(model, ctx.text, min(cfg.context, 256), 4 * 256 + 8)[:4]
    # mode "all": every block edited at once, one forward per site (as the edit is used)
    per_layer = ctx.cached("audit_layers", lambda: post_wo_audit(
        model, tokens, mode="all", skip_first=cfg.skip_first, log_path=ctx.log("audit")))
    overall = audit_overall(per_layer)
    overall.to_csv(ctx.csv("audit"), index=False)
    ctx.report.section("7. Post-W_O audit (Table 6)",
                       "At s_par = 0, all blocks edited: ||y~ − y||/||y|| (perturbation), its square (energy) and ||y~||/||y|| "
                       "(retained) of the attention output after W_O. Qwen3-0.6B in the paper: residual "
                       "attention 25.15% / 9.32% / 95.01%; exclude-self 49.10% / 25.89% / 83.36%.")
    ctx.report.table(overall, "overall (token-weighted)")


_STEP_FNS = {
    "profile": _step_profile, "sweeps": _step_sweeps, "compare": _step_compare, "heads": _step_heads,
    "mlp": _step_mlp, "closed_form": _step_closed_form, "audit": _step_audit,
}


def run_atlas(cfg: AtlasConfig, model=None) -> Path:
    """Run the chosen steps and write ``report.html`` + CSVs into ``cfg.out_dir()``."""
    from .data import load_text
    from .models import load_model
    from .report import Report

    unknown = [s for s in cfg.steps if s not in _STEP_FNS]
    if unknown:
        raise ValueError(f"unknown atlas step(s) {unknown}; steps: {list(STEPS)}")
    text = load_text(cfg.corpus)
    model = model if model is not None else load_model(cfg.model)
    if cfg.context > model.cfg.n_ctx:
        raise ValueError(f"context {cfg.context} exceeds the model's n_ctx {model.cfg.n_ctx}")
    out = cfg.out_dir()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    conf = dataclasses.asdict(cfg)
    if (out / "config.json").exists():  # a partial rerun: the steps of earlier runs stay on record
        done = set(json.loads((out / "config.json").read_text()).get("steps", ())) | set(cfg.steps)
        conf["steps"] = [s for s in STEPS if s in done]
    (out / "config.json").write_text(json.dumps(conf, indent=2, default=str))
    report = Report(f"tlgeo atlas: {cfg.model}")
    report.text(f"Model {cfg.model} ({model.cfg.n_layers} layers, d_model {model.cfg.d_model}, "
                f"{model.cfg.n_heads} heads / {model.cfg.n_key_value_heads or model.cfg.n_heads} KV heads); "
                f"text: {cfg.corpus}. Budgets: {out / 'config.json'}.", note=True)
    ctx = _Ctx(cfg, model, text, report)
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    peak_mb: dict[str, float] = {}
    for step in STEPS:
        if step not in cfg.steps:
            continue
        t = time.perf_counter()
        print(f"[atlas] {step} ...", flush=True)
        _STEP_FNS[step](ctx)
        ctx.timings[step] = time.perf_counter() - t
        peak_mb[step] = _peak_rss_mb()
        print(f"[atlas] {step} done in {ctx.timings[step]:.0f} s (peak RSS so far {peak_mb[step]:.0f} MB)", flush=True)
        report.save(out / "report.html")  # a partial report after every step
    timings = pd.DataFrame({"run": started, "step": list(ctx.timings), "seconds": list(ctx.timings.values()),
                            "peak_rss_mb_so_far": [peak_mb[k] for k in ctx.timings]})
    path = out / "timings.csv"  # one block of rows per run, appended (a rerun of cached steps takes ~0 s)
    earlier = pd.read_csv(path) if path.exists() else None
    pd.concat([earlier, timings], ignore_index=True).to_csv(path, index=False)
    report.section("Timings").table(timings.drop(columns="run"))
    return report.save(out / "report.html")


def _peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (``nan`` where unknown)."""
    try:
        import resource
        import sys

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss / 2**20 if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB on Linux
    except (ImportError, OSError):
        return float("nan")


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
