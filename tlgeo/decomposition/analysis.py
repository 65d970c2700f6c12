"""The directional decomposition of one model on the analysis contract:
``run(model, DecompositionConfig(...)) -> DecompositionResult`` (``tlgeo decompose``), and the two
small analyses it is made of, ``run_profile`` (``tlgeo profile``) and ``run_ppl`` (``tlgeo ppl``). It registers
every analysis of the package: these three, then the paper's other experiments (their runs, results and plans
are in :mod:`.experiments`, which imports nothing from here).

Work units:

* ``decomposition``: ``("profile",)`` (the parallel-ratio profile of every decomposition site)
  and one ``("edit", site, "par" | "perp")`` per removal (which part of which site is removed).
  Every run of edits measures the unedited model too (each row's ``delta_ppl`` is against it);
  it is the same row in every part, so a merge keeps it once.
* ``profile``: one ``("site", name)`` per profiled site (the observers do not change the forward,
  so a site's rows are the same whichever others are profiled with it).
* ``ppl``: ``("baseline",)`` (the unedited model) and ``("edit",)``.

A run over some units followed by ``Result.merge`` equals a run over all of them. The text is
read from ``cfg.corpus`` with :func:`tlgeo.data.load_text`. With ``out`` each table is merged
into its CSV (the file names and columns of ``tlgeo decompose``, ``profile`` and ``ppl``) as soon as it
is done; the perplexity runs resume from JSON-lines logs in ``log`` (default ``out``):
``edits.jsonl`` and ``ppl.jsonl``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from ..runner.analysis import Analysis, Result, Table, register_analysis
from ..data import load_text
from ..geometry.parallel import is_unit
from ..hooks.edits import Edit
from ..models import Model
from ..runner.identity import identified, run_identity
from ..runner.results import merge_csv
from ..storage import write_csv
from . import compare as _compare  # looked up at call time: a test may stand in for compare_edits
from .audit import AUDIT_SITES
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
from .experiments import (
    AuditResult,
    ClosedFormResult,
    CompareResult,
    HeadsResult,
    MlpCarrierResult,
    SweepsResult,
    audit_units,
    closed_form_units,
    compare_units,
    heads_units,
    mlp_carrier_units,
    plan_audit,
    plan_closed_form,
    plan_compare,
    plan_heads,
    plan_mlp_carrier,
    plan_sweeps,
    run_audit,
    run_closed_form,
    run_compare,
    run_heads,
    run_mlp_carrier,
    run_sweeps,
    sweeps_units,
)
from .observe import parallel_profile, summarize_profile

__all__ = [
    "PROFILE_KEY",
    "DecompositionResult",
    "ProfileResult",
    "PplResult",
    "run",
    "units",
    "run_profile",
    "profile_units",
    "run_ppl",
    "ppl_units",
    "profile_summary_table",
    "edit_unit",
]

PROFILE_KEY = ("corpus", "max_tokens", "seq_len", "site", "layer")
_PER_TOKEN_KEY = ("site", "layer", "head", "seq", "pos")
OnTable = Callable[[str, pd.DataFrame], Any]

_PROFILE_TABLE = Table("profile_summary", PROFILE_KEY, "profile_summary.csv")


@dataclass
class DecompositionResult(Result):
    """``profile_summary``: per site and layer, the parallel ratio's mean, median and share > 1,
    mean alpha, norm ratio and cosine (position 0 left out), with the settings ``corpus,
    max_tokens, seq_len``; ``edits``: one perplexity row per removal and the unedited model
    (``site`` ``none``), keyed by the edit and the measurement settings, with ``corpus``."""

    profile_summary: pd.DataFrame | None = None
    edits: pd.DataFrame | None = None

    TABLES = (_PROFILE_TABLE, Table("edits", _compare.KEY, "edits.csv"))


@dataclass
class ProfileResult(Result):
    """``profile_summary`` as in :class:`DecompositionResult`; ``per_token`` (not a saved table:
    its file is named by the settings, :meth:`ProfileConfig.per_token_file`): every token's row
    of :func:`parallel_profile`, when ``per_token`` was asked for."""

    profile_summary: pd.DataFrame | None = None
    per_token: pd.DataFrame | None = None

    TABLES = (_PROFILE_TABLE,)


@dataclass
class PplResult(Result):
    """``ppl``: the unedited model (``site`` ``none``) and the edit, one perplexity row each."""

    ppl: pd.DataFrame | None = None

    TABLES = (Table("ppl", _compare.KEY, "ppl.csv"),)


# ---------------------------------------------------------------------------
# shared parts
# ---------------------------------------------------------------------------


def profile_summary_table(
    model: Model,
    text: str,
    *,
    corpus: str,
    max_tokens: int | None,
    seq_len: int,
    sites: Sequence[str],
    batch_size: int = 8,
    progress: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(summary, per-token rows)`` of the parallel-ratio profile of ``sites``; the summary
    carries the settings ``corpus, max_tokens, seq_len`` (the key of ``profile_summary.csv``)."""
    df = parallel_profile(
        model, text, sites=sites, seq_len=seq_len, max_tokens=max_tokens, batch_size=batch_size, progress=progress
    )
    summary = summarize_profile(df).assign(corpus=corpus, max_tokens=max_tokens, seq_len=seq_len)
    return summary, df


def edit_unit(e: Edit) -> tuple[str, str, str]:
    """The work unit of a removal: ``("edit", site, "par")`` (s_par = 0) or ``(..., "perp")``."""
    return ("edit", e.site.name, "par" if is_unit(e.s_perp) else "perp")


def _plain_lists(df: pd.DataFrame) -> pd.DataFrame:
    """``layers`` / ``heads`` tuples as lists, as the resume log stores them (one CSV spelling)."""
    for c in ("layers", "heads"):
        if c in df.columns:
            df[c] = df[c].map(lambda v: list(v) if isinstance(v, tuple) else v)
    return df


def _perplexities(
    model: Model, text: str, edits: list[Edit], cfg, log_path: Path | None, corpus: str, progress: bool
) -> pd.DataFrame:
    df = _compare.compare_edits(
        model,
        text,
        edits,
        context=cfg.context,
        max_tokens=cfg.max_tokens,
        batch_size=cfg.batch_size,
        log_path=log_path,
        progress=progress,
    )
    return _plain_lists(df.assign(corpus=corpus))


def _log_dir(out, log) -> Path | None:
    return Path(log) if log is not None else (Path(out) if out is not None else None)


# ---------------------------------------------------------------------------
# decomposition: tlgeo decompose
# ---------------------------------------------------------------------------


def units(model: Model, cfg: DecompositionConfig) -> list[tuple]:
    """``("profile",)`` (when a decomposition site is chosen), then one ``("edit", site, part)``
    per removal, in the order they are measured."""
    head = [("profile",)] if cfg.profile_sites() else []
    return head + [edit_unit(e) for e in cfg.edits()]


@identified
def run(
    model: Model,
    cfg: DecompositionConfig,
    *,
    out: str | Path | None = None,
    log: str | Path | None = None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: OnTable | None = None,
) -> DecompositionResult:
    """The profile, then perplexity under every removal of ``cfg``, on ``units`` (default all).
    With ``out`` each table is merged into ``out`` as soon as it is done; the perplexity runs
    resume from ``<log>/edits.jsonl`` (``log`` defaults to ``out``). ``on_table(name, df)`` is
    called after each table (the CLI prints it)."""
    cfg.check_fits(model)
    chosen = None if units is None else {tuple(u) for u in units}
    text = load_text(cfg.corpus)
    log_dir = _log_dir(out, log)
    tables: dict[str, pd.DataFrame] = {}
    if cfg.profile_sites() and (chosen is None or ("profile",) in chosen):
        tables["profile_summary"], _ = profile_summary_table(
            model,
            text,
            corpus=cfg.corpus,
            max_tokens=cfg.profile_tokens,
            seq_len=cfg.profile_seq_len,
            sites=cfg.profile_sites(),
            progress=progress,
        )
        DecompositionResult(profile_summary=tables["profile_summary"]).deliver(
            out, on_table, identity=run_identity(model).row()
        )
    edits = [e for e in cfg.edits() if chosen is None or edit_unit(e) in chosen]
    if edits:
        tables["edits"] = _perplexities(
            model, text, edits, cfg, log_dir / "edits.jsonl" if log_dir else None, cfg.corpus, progress
        )
        DecompositionResult(edits=tables["edits"]).deliver(out, on_table, identity=run_identity(model).row())
    return DecompositionResult(**tables)


# ---------------------------------------------------------------------------
# profile: tlgeo profile
# ---------------------------------------------------------------------------


def profile_units(model: Model, cfg: ProfileConfig) -> list[tuple]:
    """One ``("site", name)`` per profiled site."""
    return [("site", s) for s in cfg.sites]


@identified
def run_profile(
    model: Model,
    cfg: ProfileConfig,
    *,
    out: str | Path | None = None,
    log: str | Path | None = None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: OnTable | None = None,
) -> ProfileResult:
    """The parallel-ratio profile of ``cfg.sites`` (those of ``units``, default all). With ``out``
    the summary is merged into ``profile_summary.csv`` and, with ``per_token``, every token's row
    written to :meth:`ProfileConfig.per_token_file` (merged by site, layer, head, window and
    position when only some units run). ``log`` is unused: one pass, nothing to resume."""
    cfg.check_fits(model)
    chosen = None if units is None else {tuple(u) for u in units}
    sites = [s for s in cfg.sites if chosen is None or ("site", s) in chosen]
    if not sites:
        return ProfileResult()
    summary, per_token = profile_summary_table(
        model,
        load_text(cfg.corpus),
        corpus=cfg.corpus,
        max_tokens=cfg.max_tokens,
        seq_len=cfg.seq_len,
        sites=sites,
        batch_size=cfg.batch_size,
        progress=progress,
    )
    if out is not None and cfg.per_token:
        path = Path(out) / cfg.per_token_file()
        if chosen is None:  # the whole profile: the file is this run's
            write_csv(path, per_token)
        else:
            merge_csv(path, per_token, _PER_TOKEN_KEY)
    ProfileResult(profile_summary=summary).deliver(out, on_table, identity=run_identity(model).row())
    return ProfileResult(profile_summary=summary, per_token=per_token if cfg.per_token else None)


# ---------------------------------------------------------------------------
# ppl: tlgeo ppl
# ---------------------------------------------------------------------------


def ppl_units(model: Model, cfg: PplConfig) -> list[tuple]:
    """``("baseline",)`` and ``("edit",)``."""
    return [("baseline",), ("edit",)]


@identified
def run_ppl(
    model: Model,
    cfg: PplConfig,
    *,
    out: str | Path | None = None,
    log: str | Path | None = None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: OnTable | None = None,
) -> PplResult:
    """Perplexity unedited and under ``cfg.edit()`` (the rows of ``units``, default both); resumes
    from ``<log>/ppl.jsonl``."""
    cfg.check_fits(model)
    chosen = {("baseline",), ("edit",)} if units is None else {tuple(u) for u in units}
    if not chosen & {("baseline",), ("edit",)}:
        return PplResult()
    edit = cfg.edit()
    edit.hooks(model)  # layers and heads that do not fit the model fail before the text is read
    log_dir = _log_dir(out, log)
    df = _perplexities(
        model,
        load_text(cfg.corpus),
        [edit] if ("edit",) in chosen else [],
        cfg,
        log_dir / "ppl.jsonl" if log_dir else None,
        cfg.corpus,
        progress,
    )
    if ("baseline",) not in chosen:
        df = df[df["site"] != "none"].reset_index(drop=True)
    PplResult(ppl=df).deliver(out, on_table, identity=run_identity(model).row())
    return PplResult(ppl=df)


# ---------------------------------------------------------------------------
# what a run costs (tlgeo plan): forward passes of each step
# ---------------------------------------------------------------------------

# the hooks' time (the profile's statistics per site, an edit) is the planner's calibration table's ("profile.site",
# "edit": tlgeo.planner.calibration); memory, measured in fresh processes at the commands' default windows: a
# perplexity pass holds 3.6 [tokens, vocab] float32 arrays (tlgeo.planner.PPL_LOGIT_COPIES); the profile a bare
# forward's arrays plus
# one float32 d_model vector per live token, layer and site (4 x 256, 5 sites)


def _corpus_tokens(cfg) -> int:
    """``cfg.tokens``, or (0 = all) the corpus's length at ~4 characters per token."""
    return cfg.tokens or len(load_text(cfg.corpus)) // 4


def _reads_pattern(sites) -> bool:
    from ..hooks.sites import SITES

    return any(role == "pattern" for s in sites for role, _ in SITES[s].reads)


def profile_work(shape, sites, tokens: int, seq_len: int, batch: int):
    """The profile as :class:`~tlgeo.planner.Work`: its windows, the sites' overhead, what it caches per token."""
    from ..planner import Work, windows

    live = min(batch * seq_len, max(tokens, seq_len))
    return Work(
        "profile",
        windows(tokens, seq_len),
        seq_len,
        batch,
        hooks={"profile.site": len(sites)},
        eager=_reads_pattern(sites),
        kept_bytes=live * shape.n_layers * len(sites) * shape.d_model * 4,
        note=f"{len(sites)} site(s): {', '.join(sites)}",
    )


def _ppl_work(name: str, tokens: int, cfg, edits: int, sites=()):
    from ..planner import PPL_LOGIT_COPIES, Work, windows

    # perplexity reads the logits out one row of the batch at a time (tlgeo.evals.perplexity.read_out_losses): the
    # [tokens, vocab] arrays are one window's, not the batch's
    return Work(
        name,
        windows(tokens, cfg.context) * edits,
        cfg.context,
        cfg.batch_size,
        hooks={} if name == "baseline" else {"edit": 1},
        logit_copies=PPL_LOGIT_COPIES / cfg.batch_size,
        eager=_reads_pattern(sites),
        note=f"{edits} perplexity pass(es)",
    )


def plan(shape, cfg: DecompositionConfig) -> list:
    """The profile, the unedited perplexity, and one perplexity pass per removal."""
    sites = cfg.profile_sites()
    out = [profile_work(shape, sites, cfg.profile_tokens, cfg.profile_seq_len, 8)] if sites else []
    edits, tokens = cfg.edits(), _corpus_tokens(cfg)
    out.append(_ppl_work("baseline", tokens, cfg, 1))
    if edits:
        out.append(_ppl_work("edits", tokens, cfg, len(edits), [e.site.name for e in edits]))
    return out


def plan_profile(shape, cfg: ProfileConfig) -> list:
    return [profile_work(shape, cfg.sites, _corpus_tokens(cfg), cfg.seq_len, cfg.batch_size)]


def plan_ppl(shape, cfg: PplConfig) -> list:
    tokens = _corpus_tokens(cfg)
    return [_ppl_work("baseline", tokens, cfg, 1), _ppl_work("edit", tokens, cfg, 1, [cfg.site])]


ANALYSIS = register_analysis(
    Analysis(
        "decomposition",
        DecompositionConfig,
        run,
        DecompositionResult,
        units,
        "main job: parallel-ratio profile + perplexity under component removal at every site (seed paper 000)",
        tiny=dict(tokens=128, context=64, profile_tokens=128, profile_seq_len=64, sites=("attn", "diag")),
        command="decompose",
        plan=plan,
        docs="analyses/decomposition",
    )
)
PROFILE = register_analysis(
    Analysis(
        "profile",
        ProfileConfig,
        run_profile,
        ProfileResult,
        profile_units,
        "parallel ratios per layer, site and token",
        tiny=dict(tokens=128, seq_len=64, sites=("attn", "value_excl_self")),
        plan=plan_profile,
        docs="analyses/decomposition",
    )
)
PPL = register_analysis(
    Analysis(
        "ppl",
        PplConfig,
        run_ppl,
        PplResult,
        ppl_units,
        "perplexity unedited and under one edit",
        tiny=dict(tokens=128, context=64, site="value_excl_self", s_par=0.0),
        plan=plan_ppl,
        docs="analyses/decomposition",
    )
)

# the paper's other experiments (runs, results and plans in experiments.py)
_TINY_TEXT = dict(tokens=128, context=64)
_DOCS = "analyses/decomposition"  # every experiment of the seed paper's page
SWEEPS = register_analysis(
    Analysis(
        "sweeps",
        SweepsConfig,
        run_sweeps,
        SweepsResult,
        sweeps_units,
        "ΔPPL over the s_par and s_perp grids at every site (seed paper 000, Figure 3)",
        tiny=dict(**_TINY_TEXT, sites=("attn", "value_excl_self"), s_par_grid=(0.0, 2.0), s_perp_grid=(0.5,)),
        plan=plan_sweeps,
        docs=_DOCS,
    )
)
COMPARE = register_analysis(
    Analysis(
        "compare",
        CompareConfig,
        run_compare,
        CompareResult,
        compare_units,
        "exclude-self vs full vs residual vs diagonal parallel removal: perplexity, zero-shot, RULER "
        "(seed paper 000, Tables 1, 2, 8)",
        tiny=dict(
            **_TINY_TEXT,
            sites=("value_excl_self", "attn"),
            scales=(0.0,),
            zeroshot_tasks=("piqa",),
            zeroshot_limit=2,
            ruler_lengths=(),
        ),
        plan=plan_compare,
        docs=_DOCS,
    )
)
HEADS = register_analysis(
    Analysis(
        "heads",
        HeadsConfig,
        run_heads,
        HeadsResult,
        heads_units,
        "per-head alpha map and single-head sensitivity (seed paper 000, Figure 7)",
        tiny=dict(texts=3, length=32, n_perm=50),
        plan=plan_heads,
        docs=_DOCS,
    )
)
MLP_CARRIER = register_analysis(
    Analysis(
        "mlp_carrier",
        MlpCarrierConfig,
        run_mlp_carrier,
        MlpCarrierResult,
        mlp_carrier_units,
        "MLP carrier: No-Para vs No-Perp loss change (seed paper 000, Table 10)",
        tiny=_TINY_TEXT,
        command="mlp-carrier",
        plan=plan_mlp_carrier,
        docs=_DOCS,
    )
)
CLOSED_FORM = register_analysis(
    Analysis(
        "closed_form",
        ClosedFormConfig,
        run_closed_form,
        ClosedFormResult,
        closed_form_units,
        "the diagonal closed form reproduces the value-space edit (seed paper 000, Table 5, Figure 4)",
        tiny=dict(tokens=16),
        command="closed-form",
        plan=plan_closed_form,
        docs=_DOCS,
    )
)
AUDIT = register_analysis(
    Analysis(
        "audit",
        AuditConfig,
        run_audit,
        AuditResult,
        audit_units,
        "post-W_O perturbation, energy and retained norm of a parallel removal (seed paper 000, Table 6)",
        tiny=dict(tokens=128, context=64, sites=AUDIT_SITES),
        plan=plan_audit,
        docs=_DOCS,
    )
)
