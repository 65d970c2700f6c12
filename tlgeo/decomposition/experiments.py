"""The paper's experiments beyond the main job, on the analysis contract: config -> run -> typed result.

Each is a command and an atlas step of the same name (:mod:`.atlas` draws its section from the result), its
record registered by :mod:`.analysis`:

* ``sweeps`` (``tlgeo sweeps``, Figure 3): perplexity over the ``s_par`` / ``s_perp`` grids at every
  site; units ``("site", name)``.
* ``compare`` (``tlgeo compare``, Tables 1, 2, 8): perplexity, zero-shot accuracy and RULER-style score
  of each site's parallel removal; units ``("ppl",)``, ``("zeroshot",)``, ``("ruler",)``.
* ``heads`` (``tlgeo heads``, Figure 7): per-head alpha and single-head sensitivity; units
  ``("alpha",)``, ``("sensitivity",)`` (its BH q is over every head and block at once).
* ``mlp_carrier`` (``tlgeo mlp-carrier``, Table 10): No-Para vs No-Perp; units ``("removal", r)``.
* ``closed_form`` (``tlgeo closed-form``, Table 5, Figure 4): units ``("variant", v)``.
* ``audit`` (``tlgeo audit``, Table 6): units ``("site", name)``.

A run over some units followed by ``Result.merge`` equals a run over all of them (every part measures
the unedited model again where its rows are against it: the same row, kept once). With ``out`` each
table is merged into its CSV (the names the atlas always wrote) as soon as it is done; long runs
resume from JSON-lines logs in ``log`` (default ``out``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ..errors import InputError
from ..runner.analysis import Result, Table
from ..data import load_text
from ..evals.perplexity import corpus_batches
from ..models import Model, model_label
from ..runner.identity import identified, run_identity
from ..runner.results import IDENTITY
from . import compare as _compare
from .audit import audit_overall, post_wo_audit
from .closed_form import closed_form_check, diag_summary
from .config import AuditConfig, ClosedFormConfig, CompareConfig, HeadsConfig, MlpCarrierConfig, SweepsConfig
from .heads import head_alpha_map, head_sensitivity
from .mlp_carrier import REMOVALS, mlp_carrier_table
from .sweeps import sensitivity_sweep

__all__ = [
    "SweepsResult",
    "CompareResult",
    "HeadsResult",
    "MlpCarrierResult",
    "ClosedFormResult",
    "AuditResult",
    "condition_label",
]

OnTable = Callable[[str, pd.DataFrame], Any]
_CORPUS = ("corpus", "tokens")
_WINDOWS = (*_CORPUS, "context", "skip_first")


def _log(out, log, name: str) -> Path | None:
    """``<log>/<name>`` (``log`` defaults to ``out``; ``None`` when neither is given)."""
    base = Path(log) if log is not None else (Path(out) if out is not None else None)
    return None if base is None else base / name


def _finish(
    model: Model, result_cls: type[Result], tables: dict[str, pd.DataFrame], out, on_table: OnTable | None
) -> Result:
    """The result of ``tables`` (derived tables made), merged into ``out`` (if given), each table shown."""
    return result_cls(**tables).deliver(out, on_table, identity=run_identity(model).row())


def _chosen(units: Sequence[tuple] | None, every: list[tuple]) -> list[tuple]:
    chosen = every if units is None else [tuple(u) for u in units]
    unknown = [u for u in chosen if u not in every]
    if unknown:
        raise InputError(f"unknown unit(s) {unknown}; this config has {every}")
    return chosen


def _settings(cfg, *names: str) -> dict:
    return {n: getattr(cfg, n) for n in names}


# ---------------------------------------------------------------------------
# sweeps (Figure 3)
# ---------------------------------------------------------------------------


@dataclass
class SweepsResult(Result):
    """``sweeps``: perplexity per site, axis (``s_par`` or ``s_perp``, the other at 1) and scale, with
    ``delta_ppl`` against the unedited model and the settings ``corpus, tokens, context, skip_first``."""

    TABLES = (Table("sweeps", ("model", *_WINDOWS, "site", "axis", "scale")),)


def sweeps_units(model: Model, cfg: SweepsConfig) -> list[tuple]:
    return [("site", s) for s in cfg.sites]


@identified
def run_sweeps(
    model: Model,
    cfg: SweepsConfig,
    *,
    out=None,
    log=None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: OnTable | None = None,
) -> SweepsResult:
    """The sweep of the chosen sites; resumes from ``<log>/sweeps.jsonl``."""
    cfg.check_fits(model)
    sites = [u[1] for u in _chosen(units, sweeps_units(model, cfg))]
    df = sensitivity_sweep(
        model,
        load_text(cfg.corpus),
        sites=sites,
        s_par_grid=cfg.s_par_grid,
        s_perp_grid=cfg.s_perp_grid,
        skip_first=cfg.skip_first,
        context=cfg.context,
        max_tokens=cfg.max_tokens,
        batch_size=cfg.batch(),
        log_path=_log(out, log, "sweeps.jsonl"),
        progress=progress,
    )
    df = df.assign(model=model_label(model), **_settings(cfg, *_WINDOWS))
    return _finish(model, SweepsResult, {"sweeps": df}, out, on_table)


# ---------------------------------------------------------------------------
# compare (Tables 1, 2, 8)
# ---------------------------------------------------------------------------


def condition_label(edit) -> str:
    """``value_excl_self s_par=0``: a compared condition's name (``unedited`` for ``None``)."""
    return "unedited" if edit is None else f"{edit.site.name} s_par={edit.s_par:g}"


def _compare_table(r: "CompareResult") -> pd.DataFrame | None:
    """One row per condition: perplexity, mean zero-shot accuracies (%) and mean RULER score (%)."""
    if r.compare_ppl is None:
        return None
    ppl = r.compare_ppl
    table = ppl[["condition", "ppl", "delta_ppl"]]
    zs, rl = r.compare_zeroshot, r.compare_ruler
    if zs is not None and len(zs):
        table = table.merge(
            zs.groupby("condition", sort=False)[["acc", "acc_norm"]]
            .mean()
            .mul(100)
            .add_prefix("zeroshot_")
            .reset_index(),
            on="condition",
            how="left",
        )
    else:
        table = table.assign(zeroshot_acc=np.nan, zeroshot_acc_norm=np.nan)
    if rl is not None and len(rl):
        table = table.merge(
            rl.groupby("condition", sort=False)["score"].mean().rename("ruler").reset_index(),
            on="condition",
            how="left",
        )
    else:
        table = table.assign(ruler=np.nan)
    keep = [c for c in (*IDENTITY, *_WINDOWS) if c in ppl.columns]  # what every row shares
    return table.assign(**{c: ppl[c].iloc[0] for c in keep})


@dataclass
class CompareResult(Result):
    """``compare_ppl``: perplexity unedited and under each removal (``condition``; ``source``: measured
    here, or read from a sweep in the same folder at the same settings); ``compare_zeroshot``: accuracy
    per condition and task; ``compare_zeroshot_paired``: the change against the unedited model on the
    same items (bootstrap CI, sign-flip p); ``compare_ruler``: score per condition, task and length;
    ``compare``: one row per condition (derived)."""

    TABLES = (
        Table("compare_ppl", ("model", *_WINDOWS, "condition"), volatile=("source",)),
        Table("compare_zeroshot", ("model", "zeroshot_limit", "condition", "task"), volatile=("seconds",)),
        Table("compare_zeroshot_paired", ("model", "zeroshot_limit", "condition", "metric")),
        Table("compare_ruler", ("model", "ruler_samples", "ruler_template", "seed", "condition", "task", "length")),
        Table("compare", ("model", *_WINDOWS, "condition"), derive=_compare_table),
    )


def compare_units(model: Model, cfg: CompareConfig) -> list[tuple]:
    out = [("ppl",)]
    if cfg.zeroshot_tasks:
        out.append(("zeroshot",))
    if cfg.ruler_tasks and [n for n in cfg.ruler_lengths if n <= model.cfg.n_ctx]:
        out.append(("ruler",))
    return out


def _ppl_from_sweeps(out, cfg: CompareConfig, edits: list, identity: dict) -> pd.DataFrame | None:
    """The comparison's perplexities from ``out/sweeps.csv`` where a sweep of this model at the same
    settings measured every edit (its ``s_par`` axis: ``s_perp = 1``, the same tokens, context and
    ``skip_first``); ``None`` where it did not. The same numbers as measuring them (a sweep point
    resumes at ``skip_first`` from the unedited run, which equals the full forward)."""
    path = None if out is None else Path(out) / "sweeps.csv"
    if path is None or not path.exists():
        return None
    sweeps = pd.read_csv(path)
    same = pd.Series(True, index=sweeps.index)
    for k, v in {**identity, **_settings(cfg, *_WINDOWS)}.items():
        if k not in sweeps.columns:
            return None
        same &= sweeps[k].astype(str) == str(v)
    sweeps = sweeps[same]
    points = sweeps[sweeps["axis"] == "s_par"].set_index(["site", "scale"])
    wanted = [(e.site.name, float(e.s_par)) for e in edits]
    if sweeps.empty or not all(k in points.index for k in wanted):
        return None
    base_ppl = float((sweeps["ppl"] - sweeps["delta_ppl"]).median())
    rows = [
        {
            **_compare.baseline_key(),
            "ppl": base_ppl,
            "nll": float(np.log(base_ppl)),
            "n_tokens": int(sweeps["n_tokens"].iloc[0]),
        }
    ]
    for e, k in zip(edits, wanted):
        rows.append({**e.describe(), **points.loc[k, ["ppl", "nll", "n_tokens"]].to_dict()})
    df = pd.DataFrame(rows).astype({"n_tokens": int}).assign(source="sweeps")
    df["delta_ppl"] = df["ppl"] - base_ppl
    return df


def _compare_ppl(model, cfg: CompareConfig, text: str, out, log, progress: bool) -> pd.DataFrame:
    from ..runner.identity import run_identity

    edits = cfg.edits()
    df = _ppl_from_sweeps(out, cfg, edits, run_identity(model).row())
    if df is None:
        df = _compare.compare_edits(
            model,
            text,
            edits,
            context=cfg.context,
            max_tokens=cfg.max_tokens,
            batch_size=cfg.batch(),
            log_path=_log(out, log, "compare_ppl.jsonl"),
            progress=progress,
        ).assign(source="measured")
    cols = ["site", "s_par", "s_perp", "ppl", "nll", "n_tokens", "delta_ppl", "source"]
    return df[cols].assign(condition=["unedited"] + [condition_label(e) for e in edits])


def _conditions(model, cfg: CompareConfig, keep: Callable) -> list[tuple[str, list]]:
    """``(label, hooks)`` of the unedited model and of each edit ``keep(edit)`` accepts."""
    return [("unedited", [])] + [(condition_label(e), e.hooks(model)) for e in cfg.edits() if keep(e)]


def _compare_zeroshot(model, cfg: CompareConfig, out, log, progress: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    from tqdm.auto import tqdm

    from ..evals.zeroshot import evaluate_zeroshot, paired_accuracy_change

    scored = _conditions(model, cfg, lambda e: float(e.s_par) in cfg.zeroshot_scales)
    path = _log(out, log, "zeroshot.jsonl")
    frames, items = [], {}
    for label, hooks in tqdm(scored, desc="zero-shot conditions", unit="condition", disable=not progress):
        df, it = evaluate_zeroshot(
            model,
            cfg.zeroshot_tasks,
            limit=cfg.zeroshot_limit,
            fwd_hooks=hooks,
            tag=label,
            log_path=path,
            progress=progress,
            return_items=True,
        )
        frames.append(df.assign(condition=label))
        items[label] = it
    base = items.pop("unedited")
    paired = [paired_accuracy_change(it, base, seed=cfg.seed).assign(condition=label) for label, it in items.items()]
    zs = pd.concat(frames, ignore_index=True).assign(zeroshot_limit=cfg.zeroshot_limit)
    paired = pd.concat(paired, ignore_index=True) if paired else pd.DataFrame(columns=["condition", "metric"])
    return zs, paired.assign(zeroshot_limit=cfg.zeroshot_limit)


def _compare_ruler(model, cfg: CompareConfig, out, log, progress: bool) -> pd.DataFrame:
    from tqdm.auto import tqdm

    from ..evals.ruler import evaluate_ruler

    lengths = [n for n in cfg.ruler_lengths if n <= model.cfg.n_ctx]
    scored = _conditions(model, cfg, lambda e: e.site.name in cfg.ruler_sites)
    frames = [
        evaluate_ruler(
            model,
            cfg.ruler_tasks,
            lengths,
            cfg.ruler_samples,
            fwd_hooks=hooks,
            label=label,
            seed=cfg.seed,
            template=cfg.ruler_template,
            log_path=_log(out, log, "ruler.jsonl"),
            progress=progress,
        ).assign(condition=label)
        for label, hooks in tqdm(scored, desc="RULER conditions", unit="condition", disable=not progress)
    ]
    return (
        pd.concat(frames, ignore_index=True)
        .drop(columns=["preds"], errors="ignore")
        .assign(**_settings(cfg, "ruler_samples", "ruler_template", "seed"))
    )


@identified
def run_compare(
    model: Model,
    cfg: CompareConfig,
    *,
    out=None,
    log=None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: OnTable | None = None,
) -> CompareResult:
    """Perplexity, zero-shot and RULER of the chosen units; zero-shot and RULER resume from
    ``<log>/zeroshot.jsonl`` and ``<log>/ruler.jsonl``, measured perplexities from ``compare_ppl.jsonl``."""
    cfg.check_fits(model)
    chosen = _chosen(units, compare_units(model, cfg))
    for e in cfg.edits():
        e.hooks(model)  # layers and sites the model lacks fail before any work
    label = model_label(model)
    tables: dict[str, pd.DataFrame] = {}
    if ("ppl",) in chosen:
        tables["compare_ppl"] = _compare_ppl(model, cfg, load_text(cfg.corpus), out, log, progress).assign(
            model=label, **_settings(cfg, *_WINDOWS)
        )
    if ("zeroshot",) in chosen:
        zs, paired = _compare_zeroshot(model, cfg, out, log, progress)
        tables.update(compare_zeroshot=zs.assign(model=label), compare_zeroshot_paired=paired.assign(model=label))
    if ("ruler",) in chosen:
        tables["compare_ruler"] = _compare_ruler(model, cfg, out, log, progress).assign(model=label)
    return _finish(model, CompareResult, tables, out, on_table)


# ---------------------------------------------------------------------------
# heads (Figure 7)
# ---------------------------------------------------------------------------


@dataclass
class HeadsResult(Result):
    """``heads_alpha``: per block and head, the exclude-self update's mean alpha and its share > 0;
    ``heads_sensitivity``: per probed block and head (and ``all``), the loss change when its parallel
    part is removed, with a bootstrap CI, sign-flip p and Benjamini–Hochberg q over every head and block."""

    TABLES = (
        Table("heads_alpha", ("model", "corpus", "texts", "length", "layer", "head")),
        Table("heads_sensitivity", ("model", "corpus", "texts", "length", "skip_first", "seed", "layer", "head")),
    )


def heads_units(model: Model, cfg: HeadsConfig) -> list[tuple]:
    return [("alpha",), ("sensitivity",)]


def head_texts(model: Model, cfg: HeadsConfig):
    """The ``[texts, length]`` token windows both parts read."""
    return corpus_batches(model, load_text(cfg.corpus), cfg.length, cfg.texts * cfg.length + 8)[: cfg.texts]


@identified
def run_heads(
    model: Model,
    cfg: HeadsConfig,
    *,
    out=None,
    log=None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: OnTable | None = None,
) -> HeadsResult:
    """The alpha map and the sensitivity map; the sensitivity resumes from ``<log>/heads_sensitivity.jsonl``."""
    cfg.check_fits(model)
    chosen = _chosen(units, heads_units(model, cfg))
    texts = head_texts(model, cfg)
    settings = {"model": model_label(model), **_settings(cfg, "corpus", "texts", "length")}
    tables = {}
    if ("alpha",) in chosen:
        tables["heads_alpha"] = head_alpha_map(model, texts, progress=progress).assign(**settings)
    if ("sensitivity",) in chosen:
        tables["heads_sensitivity"] = head_sensitivity(
            model,
            texts,
            layers=cfg.sensitivity_layers(model.cfg.n_layers),
            n_perm=cfg.n_perm,
            seed=cfg.seed,
            log_path=_log(out, log, "heads_sensitivity.jsonl"),
            progress=progress,
        ).assign(**settings, skip_first=cfg.skip_first, seed=cfg.seed)
    return _finish(model, HeadsResult, tables, out, on_table)


# ---------------------------------------------------------------------------
# MLP carrier (Table 10)
# ---------------------------------------------------------------------------


@dataclass
class MlpCarrierResult(Result):
    """``mlp_carrier``: the unedited model and each removal at each carrier site, mean NLL and its change."""

    TABLES = (Table("mlp_carrier", ("model", *_WINDOWS, "site", "removal", "narrow"), volatile=("seconds",)),)


def mlp_carrier_units(model: Model, cfg: MlpCarrierConfig) -> list[tuple]:
    return [("removal", r) for r in REMOVALS]


@identified
def run_mlp_carrier(
    model: Model,
    cfg: MlpCarrierConfig,
    *,
    out=None,
    log=None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: OnTable | None = None,
) -> MlpCarrierResult:
    """No-Para and No-Perp of the chosen units; resumes from ``<log>/mlp_carrier.jsonl``."""
    cfg.check_fits(model)
    removals = [u[1] for u in _chosen(units, mlp_carrier_units(model, cfg))]
    df = mlp_carrier_table(
        model,
        load_text(cfg.corpus),
        max_tokens=cfg.max_tokens,
        context=cfg.context,
        skip_first=cfg.skip_first,
        removals=removals,
        batch_size=cfg.batch(),
        log_path=_log(out, log, "mlp_carrier.jsonl"),
        progress=progress,
    )
    return _finish(
        model,
        MlpCarrierResult,
        {"mlp_carrier": df.assign(model=model_label(model), **_settings(cfg, *_WINDOWS))},
        out,
        on_table,
    )


# ---------------------------------------------------------------------------
# closed form (Table 5, Figure 4)
# ---------------------------------------------------------------------------

_CF = ("model", "corpus", "tokens", "s_par", "skip_first", "variant")


@dataclass
class ClosedFormResult(Result):
    """``closed_form_errors``: per variant, quantity and block, the closed form's error against the
    edit; ``closed_form_diag``: the attention diagonal before and after, summarised per variant;
    ``closed_form_tokens``: the diagonal per variant, block, head and position; ``closed_form_attention``:
    the exclude-self variant's attention pattern of block ``n_layers // 2``, heads 0 and 1, before and after
    the edit (:func:`tlgeo.plotting.attention_rows`; the report's attention view)."""

    TABLES = (
        Table("closed_form_errors", (*_CF, "quantity", "layer")),
        Table("closed_form_diag", _CF),
        Table("closed_form_tokens", (*_CF, "layer", "head", "seq", "pos"), "closed_form_tokens.csv.gz"),
        Table("closed_form_attention", (*_CF, "layer", "view", "query", "key"), "closed_form_attention.csv.gz"),
    )

    VIEW_VARIANT, VIEW_HEADS = "value_excl_self", (0, 1)  # the attention view's edit and heads


def closed_form_units(model: Model, cfg: ClosedFormConfig) -> list[tuple]:
    return [("variant", v) for v in cfg.variants]


def closed_form_window(model: Model, cfg: ClosedFormConfig):
    """The one ``[1, tokens]`` window checked."""
    return corpus_batches(model, load_text(cfg.corpus), cfg.tokens, cfg.tokens + 8)[:1]


@identified
def run_closed_form(
    model: Model,
    cfg: ClosedFormConfig,
    *,
    out=None,
    log=None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: OnTable | None = None,
) -> ClosedFormResult:
    """The closed-form check of the chosen variants (two forwards each: nothing to resume)."""
    cfg.check_fits(model)
    variants = [u[1] for u in _chosen(units, closed_form_units(model, cfg))]
    res = closed_form_check(
        model,
        closed_form_window(model, cfg),
        cfg.s_par,
        variants=variants,
        skip_first=cfg.skip_first,
        progress=progress,
    )
    settings = {"model": model_label(model), **_settings(cfg, "corpus", "tokens", "s_par", "skip_first")}
    tables = {
        "closed_form_errors": res.errors.assign(**settings),
        "closed_form_diag": diag_summary(res.diag).assign(**settings),
        "closed_form_tokens": res.diag.assign(**settings),
    }
    if ClosedFormResult.VIEW_VARIANT in variants:  # the attention view, in the unit of its variant
        from .plots import attention_before_after_rows

        layer, heads = model.cfg.n_layers // 2, [h for h in ClosedFormResult.VIEW_HEADS if h < model.cfg.n_heads]
        rows = attention_before_after_rows(
            model, closed_form_window(model, cfg), layer, ClosedFormResult.VIEW_VARIANT, cfg.s_par, heads=heads
        )
        tables["closed_form_attention"] = rows.assign(**settings, variant=ClosedFormResult.VIEW_VARIANT, layer=layer)
    return _finish(model, ClosedFormResult, tables, out, on_table)


# ---------------------------------------------------------------------------
# post-W_O audit (Table 6)
# ---------------------------------------------------------------------------


def _audit_table(r: "AuditResult") -> pd.DataFrame | None:
    if r.audit_layers is None or r.audit_layers.empty:
        return None
    keep = [c for c in (*IDENTITY, "corpus", "tokens", "context", "skip_first") if c in r.audit_layers.columns]
    return audit_overall(r.audit_layers).assign(**{c: r.audit_layers[c].iloc[0] for c in keep})


_AUDIT = ("model", "corpus", "tokens", "context", "skip_first", "site", "s_par", "s_perp", "mode")


@dataclass
class AuditResult(Result):
    """``audit_layers``: per site and block, the attention output's perturbation, energy and retained
    norm (token sums and means); ``audit``: per site over blocks and tokens (derived)."""

    TABLES = (Table("audit_layers", (*_AUDIT, "layer")), Table("audit", _AUDIT, derive=_audit_table))


def audit_units(model: Model, cfg: AuditConfig) -> list[tuple]:
    return [("site", s) for s in cfg.sites]


def audit_windows(model: Model, cfg: AuditConfig):
    """``tokens // context`` windows of ``context`` tokens (at least one)."""
    n = max(1, cfg.tokens // cfg.context) if cfg.tokens else None
    windows = corpus_batches(model, load_text(cfg.corpus), cfg.context, n * cfg.context + 8 if n else None)
    return windows[:n] if n else windows


@identified
def run_audit(
    model: Model,
    cfg: AuditConfig,
    *,
    out=None,
    log=None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: OnTable | None = None,
) -> AuditResult:
    """The audit of the chosen sites; resumes from ``<log>/audit.jsonl``."""
    cfg.check_fits(model)
    sites = [u[1] for u in _chosen(units, audit_units(model, cfg))]
    per_layer = post_wo_audit(
        model,
        audit_windows(model, cfg),
        sites=sites,
        s_par=cfg.s_par,
        mode=cfg.mode,
        skip_first=cfg.skip_first,
        log_path=_log(out, log, "audit.jsonl"),
        progress=progress,
    )
    per_layer = per_layer.assign(
        model=model_label(model), **_settings(cfg, "corpus", "tokens", "context", "skip_first")
    )
    return _finish(model, AuditResult, {"audit_layers": per_layer}, out, on_table)


# ---------------------------------------------------------------------------
# what a run costs (tlgeo plan): its forwards, from the model's shape
# ---------------------------------------------------------------------------

# forward tokens of one zero-shot item (its choices, context and continuation, as scored) and of one RULER
# sample at length L (the prompt and the answer's greedy steps), in units of L: from the SmolLM2 atlas's compare
# step on the planner's reference CPU, ~0.2 s per item, task and condition and ~5 s per sample of 1024 tokens
# (its step times: results/atlas-smollm2-135m/timings.csv)
ZEROSHOT_TOKENS_PER_ITEM = 100
RULER_PASSES = 2.3


def _text_tokens(cfg) -> int:
    return cfg.tokens or len(load_text(cfg.corpus)) // 4


def _edit_passes(name: str, tokens: int, window: int, batch: int, passes: int, blocks: float = 1.0, note: str = ""):
    from ..planner import PPL_LOGIT_COPIES, Work, windows

    per_pass = windows(tokens, window)
    batch = max(1, min(batch, per_pass // window))  # each pass reads the same windows: a short text, small batches
    return Work(
        name,
        per_pass * passes,
        window,
        batch,
        hooks={"edit": 1},
        logit_copies=PPL_LOGIT_COPIES,
        blocks=blocks,
        note=note or f"{passes} perplexity pass(es)",
    )


def plan_sweeps(shape, cfg: SweepsConfig) -> list:
    """One unedited pass, then one pass per grid point resumed at ``skip_first``."""
    from .sweeps import sweep_points

    points = [p for p in sweep_points(cfg.sites, cfg.s_par_grid, cfg.s_perp_grid) if not p.is_noop]
    tokens, n = _text_tokens(cfg), shape.n_layers
    return [
        _edit_passes("unedited", tokens, cfg.context, cfg.batch(), 1),
        _edit_passes(
            "grid points",
            tokens,
            cfg.context,
            cfg.batch(),
            len(points),
            (n - cfg.skip_first) / n,
            f"{len(points)} points resumed at block {cfg.skip_first}",
        ),
    ]


def plan_compare(shape, cfg: CompareConfig) -> list:
    """Perplexity unedited and per condition; zero-shot items and RULER samples per scored condition."""
    from ..planner import Work

    edits = cfg.edits()
    out = [_edit_passes("perplexity", _text_tokens(cfg), cfg.context, cfg.batch(), 1 + len(edits))]
    if cfg.zeroshot_tasks:
        conditions = 1 + sum(float(e.s_par) in cfg.zeroshot_scales for e in edits)
        tokens = ZEROSHOT_TOKENS_PER_ITEM * cfg.zeroshot_limit * len(cfg.zeroshot_tasks) * conditions
        out.append(
            Work(
                "zero-shot",
                tokens,
                64,
                8,
                note=f"{len(cfg.zeroshot_tasks)} task(s) x {cfg.zeroshot_limit} items x {conditions} conditions",
            )
        )
    lengths = [L for L in cfg.ruler_lengths if L <= shape.n_ctx]
    if cfg.ruler_tasks and lengths:
        conditions = 1 + sum(e.site.name in cfg.ruler_sites for e in edits)
        reps = len(cfg.ruler_tasks) * cfg.ruler_samples * conditions
        out += [Work(f"RULER at {L}", int(RULER_PASSES * L * reps), L, 1, note=f"{reps} samples") for L in lengths]
    return out


def plan_heads(shape, cfg: HeadsConfig) -> list:
    """The alpha map (one eager pass), then per probed block one pass per head and one for all heads,
    resumed at that block."""
    from ..planner import Work

    tokens, n = cfg.texts * cfg.length, shape.n_layers
    layers = cfg.sensitivity_layers(n)
    resumed = sum((n - L) / n for L in layers) * (shape.n_heads + 1)
    return [
        Work("alpha map", tokens, cfg.length, 8, eager=True, note=f"{cfg.texts} texts"),
        Work(
            "sensitivity",
            tokens * (1 + int(round(resumed))),
            cfg.length,
            8,
            eager=True,
            note=f"{len(layers)} block(s) x {shape.n_heads + 1} conditions, resumed",
        ),
    ]


def plan_mlp_carrier(shape, cfg: MlpCarrierConfig) -> list:
    """The unedited pass and one per removal and carrier site (both narrow choices where there is a
    narrow block)."""
    from .mlp_carrier import narrow_width

    narrow = 2 if narrow_width(shape.d_mlp, shape.d_model) else 1
    passes = 1 + len(REMOVALS) * (1 + 2 * narrow)
    return [_edit_passes("removals", _text_tokens(cfg), cfg.context, cfg.batch(), passes)]


def plan_closed_form(shape, cfg: ClosedFormConfig) -> list:
    """Two eager forwards of the window per variant (the edit and its closed form)."""
    from ..planner import Work

    return [
        Work(
            "edit and closed form",
            2 * cfg.tokens * len(cfg.variants),
            cfg.tokens,
            1,
            eager=True,
            note=f"{len(cfg.variants)} variant(s)",
        )
    ]


def plan_audit(shape, cfg: AuditConfig) -> list:
    """One forward per site with the edit and its observers (every block at once, or one per block)."""
    from ..planner import Work, windows

    per_site = 1 if cfg.mode == "all" else shape.n_layers - cfg.skip_first
    return [
        Work(
            "audit",
            windows(_text_tokens(cfg), cfg.context) * len(cfg.sites) * per_site,
            cfg.context,
            4,
            eager=True,
            note=f"{len(cfg.sites)} site(s), mode {cfg.mode}",
        )
    ]
