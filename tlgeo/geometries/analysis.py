"""One token, four geometries: the four analyses' per-token quantities on one token pool, and how they relate.

``run`` collects the pool (:func:`~tlgeo.tokenwise.pool.collect_pool`, WikiText windows, float32), makes one
clean pass (the next-token NLL, the model's own predictions, the residual where perturbed runs resume),
then per block (its work unit) computes every quantity with its own analysis's code
(:mod:`.quantities`) and relates them (:func:`relations`). The relations' Benjamini–Hochberg q-values are over
every row of one run (all pairs x blocks, :func:`with_q`): a :class:`GeometriesResult` computes them whenever it
is made, from a run's blocks or from merged ones."""

from __future__ import annotations

import itertools
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from ..errors import InputError
from ..runner.analysis import Analysis, Result, Table, register_analysis
from ..families import check_support
from ..models import Model, model_label
from ..runner.identity import identified, run_identity
from ..runner.results import IDENTITY, content_digest, note_recomputed, of_identity
from ..stats.correlation import partial_spearman_ci, spearman_matrix
from ..stats.multiple import bh_qvalues
from ..tokenwise.pool import collect_pool
from .config import ATYPICALITY, CONTROLS, QUANTITIES, GeometriesConfig
from .quantities import (
    atypicality_quantities,
    clean_pass,
    damage_quantities,
    decomposition_quantities,
    pdsf_quantities,
    tokenwise_quantities,
)

__all__ = [
    "GeometriesResult",
    "run",
    "units",
    "relations",
    "relation_summary",
    "summary_table",
    "with_q",
    "token_windows",
    "ANALYSIS",
    "KEY",
    "OWNER",
    "FDR",
]

KEY = ("model", "corpus", "seq_len", "n_tokens", "delta", "seeds", "k", "seed")
ALL = tuple(q for qs in QUANTITIES.values() for q in qs)
OWNER = {q: a for a, qs in QUANTITIES.items() for q in qs}  # quantity -> the analysis it comes from
FDR = 0.05  # a relation row counts as significant after Benjamini-Hochberg when its q is below this


@dataclass
class GeometriesResult(Result):
    """``tokens`` (one row per pool token and block: every quantity, its window, position, id and log
    frequency, and its atypicality ``state_norm``, ``knn_dist`` and ``knn_dist_out``) and ``relations`` (one row
    per block and pair of quantities: Spearman's rho with its bootstrap CI, SE and p over windows, the
    Benjamini–Hochberg q over
    the run's rows, rho after shuffling within windows, the partial rho given position and frequency, and given
    those and the atypicality) and ``summary`` (one row per pair: :func:`relation_summary` over the blocks)."""

    tokens: pd.DataFrame | None = None
    relations: pd.DataFrame | None = None
    summary: pd.DataFrame | None = None

    TABLES = (
        Table("tokens", (*KEY, "layer", "index"), "geometries_tokens.csv.gz"),
        Table("relations", (*KEY, "layer", "a", "b"), "geometries_relations.csv"),
        Table("summary", (*KEY, "a", "b"), "geometries_summary.csv", derive=lambda r: summary_table(r.relations)),
    )

    def __post_init__(self) -> None:
        """The q-values over all rows of each run (:func:`with_q`) whenever the result is made: split into blocks
        and merged equals the whole; then the summary (derived) from them."""
        if self.relations is not None:
            self.relations = with_q(self.relations)
        super().__post_init__()


def token_windows(model: Model, cfg: GeometriesConfig):
    """``[n, seq_len]`` windows from the start of the corpus, enough for ``tokens`` pool tokens."""
    from ..data import load_text
    from ..evals.perplexity import corpus_batches

    windows = corpus_batches(model, load_text(cfg.corpus), cfg.seq_len, cfg.tokens + cfg.seq_len)
    return windows[: max(1, -(-cfg.tokens // (cfg.seq_len - 1)))]


def units(model: Model, cfg: GeometriesConfig) -> list[tuple]:
    """One ``("layer", l)`` per block measured."""
    return [("layer", l) for l in cfg.chosen_layers(model.cfg.n_layers)]


def relations(
    tokens: pd.DataFrame, *, n_boot: int = 200, seed: int = 0, quantities: Sequence[str] = ALL
) -> pd.DataFrame:
    """Per block, every pair of ``quantities`` of the tokens that have them all (the last position of a window
    has no next token, hence no damage): ``rho`` (Spearman), its SE ``rho_se`` (the standard deviation of rho over
    ``n_boot`` resamples of whole windows), its 95% CI ``ci_low``/``ci_high`` (``rho -+ t se``, the inversion of
    ``p``: it excludes 0 exactly when p < 0.05), ``p`` (two-sided,
    ``|rho| / rho_se`` against Student's t with windows - 1 degrees of freedom; 1 where rho or its SE is
    undefined), ``q_bh`` (Benjamini–Hochberg over every
    row returned, :func:`with_q`), ``rho_shuffled`` (each quantity shuffled within its window, mean of 10),
    ``rho_partial`` (partial Spearman given position and log frequency) and ``rho_partial_atypical`` (given those
    and the token's ``state_norm``, ``knn_dist`` and ``knn_dist_out``; NaN if the table lacks them), each with its
    95% CI over the same window resamples (``partial_ci_low`` / ``partial_ci_high``, ``atypical_ci_low`` /
    ``atypical_ci_high``): a relation "vanishes" given the controls when that CI holds 0. ``rho_partial_norm``
    (with ``norm_ci_low`` / ``norm_ci_high``): given position, frequency and ``state_norm`` only, the check of
    over-control, since the kNN distances share their construction (the pool's neighbours) with ``tok_error``.
    The atypicality measures are controls only: no pair of their own."""
    rows = []
    atypical = all(c in tokens for c in ATYPICALITY)
    nan = {"partial": None, "low": None, "high": None}
    for layer, df in tokens.groupby("layer", sort=True):
        df = df.dropna(subset=[*quantities, *CONTROLS, *(ATYPICALITY if atypical else ())])
        x = df[list(quantities)].to_numpy(float)
        groups = df["window"].to_numpy()

        def partials(controls: Sequence[str]) -> dict:
            return partial_spearman_ci(x, df[list(controls)].to_numpy(float), groups=groups, n_boot=n_boot, seed=seed)

        m = spearman_matrix(x, groups=groups, n_boot=n_boot, seed=seed)
        part = partials(CONTROLS)
        both = partials([*CONTROLS, *ATYPICALITY]) if atypical else nan
        norm = partials([*CONTROLS, "state_norm"]) if atypical else nan

        def cell(d: dict, key: str, i: int, j: int) -> float:
            return float("nan") if d[key] is None else float(d[key][i, j])

        for i, j in itertools.combinations(range(len(quantities)), 2):
            rows.append(
                {
                    "layer": int(layer),
                    "a": quantities[i],
                    "b": quantities[j],
                    "rho": m["rho"][i, j],
                    "ci_low": m["low"][i, j],
                    "ci_high": m["high"][i, j],
                    "rho_se": m["se"][i, j],
                    "p": m["p"][i, j],
                    "rho_shuffled": m["shuffled"][i, j],
                    "rho_partial": part["partial"][i, j],
                    "partial_ci_low": part["low"][i, j],
                    "partial_ci_high": part["high"][i, j],
                    "rho_partial_atypical": cell(both, "partial", i, j),
                    "atypical_ci_low": cell(both, "low", i, j),
                    "atypical_ci_high": cell(both, "high", i, j),
                    "rho_partial_norm": cell(norm, "partial", i, j),
                    "norm_ci_low": cell(norm, "low", i, j),
                    "norm_ci_high": cell(norm, "high", i, j),
                    "n": len(df),
                }
            )
    return with_q(pd.DataFrame(rows))


def summary_table(relations: pd.DataFrame) -> pd.DataFrame | None:
    """:func:`relation_summary` of every pair (within and across analyses) of each run in ``relations``
    (rows of one run share the identity and :data:`KEY` columns), with the run's columns first."""
    if relations is None or relations.empty:
        return None
    run_key = [c for c in dict.fromkeys((*IDENTITY, *KEY)) if c in relations.columns]
    if not run_key:
        return relation_summary(relations, across=False)
    parts = [
        relation_summary(df, across=False).assign(**dict(zip(run_key, k if isinstance(k, tuple) else (k,))))
        for k, df in relations.groupby(run_key, dropna=False, sort=False)
    ]
    out = pd.concat(parts, ignore_index=True)
    return out[[*run_key, *[c for c in out.columns if c not in run_key]]]


def with_q(relations: pd.DataFrame) -> pd.DataFrame:
    """``relations`` with ``q_bh``: the Benjamini–Hochberg q-values of ``p``
    (:func:`~tlgeo.stats.multiple.bh_qvalues`, ``scipy.stats.false_discovery_control``) over all rows of one run
    together (every pair x block; rows of one run share the identity and :data:`KEY` columns the table has).
    A table without ``p`` (written before it existed) is returned as it is."""
    if relations is None or "p" not in relations or relations.empty:
        return relations
    run_key = [c for c in dict.fromkeys((*IDENTITY, *KEY)) if c in relations.columns]
    q = pd.Series(np.nan, index=relations.index)
    groups = relations.groupby(run_key, dropna=False, sort=False).groups.values() if run_key else [relations.index]
    for idx in groups:
        q.loc[idx] = bh_qvalues(relations.loc[idx, "p"].to_numpy(float))
    out = relations.drop(columns="q_bh", errors="ignore")
    at = list(out.columns).index("p") + 1
    out.insert(at, "q_bh", q.to_numpy())
    return out


def relation_summary(relations: pd.DataFrame, *, across: bool = True) -> pd.DataFrame:
    """One row per pair over its blocks: ``mean_rho``, ``min_rho``, ``max_rho``, ``blocks`` (measured),
    ``significant`` (blocks whose CI excludes 0, uncorrected), ``significant_bh`` (blocks whose ``q_bh`` <
    :data:`FDR`: Benjamini–Hochberg over all pairs x blocks of the run; NaN for a table without q),
    ``same_sign`` (all blocks' rho of one sign), the mean ``partial`` (given position and frequency),
    ``partial_atypical`` (given those and ``state_norm``, ``knn_dist``, ``knn_dist_out``) and ``shuffled`` rho,
    ``atypical_significant`` (blocks whose CI of ``rho_partial_atypical`` excludes 0; NaN for a table without
    that CI); ``across``: only
    pairs from two different analyses. Strongest first. The q-values are read from the table (computed over
    all its rows, not only the pairs shown)."""
    rel = relations.dropna(subset=["rho"])
    if across:
        rel = rel[rel["a"].map(OWNER) != rel["b"].map(OWNER)]
    for c in ("q_bh", "rho_partial_atypical", "atypical_ci_low", "atypical_ci_high"):  # older tables lack them
        if c not in rel:
            rel = rel.assign(**{c: np.nan})
    rel = rel.assign(
        significant=(rel["ci_low"] > 0) | (rel["ci_high"] < 0),
        significant_bh=(rel["q_bh"] < FDR).astype(float).where(rel["q_bh"].notna()),
        atypical_significant=((rel["atypical_ci_low"] > 0) | (rel["atypical_ci_high"] < 0))
        .astype(float)
        .where(rel["atypical_ci_low"].notna()),
    )
    g = rel.groupby(["a", "b"], sort=False).agg(
        mean_rho=("rho", "mean"),
        min_rho=("rho", "min"),
        max_rho=("rho", "max"),
        blocks=("rho", "size"),
        significant=("significant", "sum"),
        significant_bh=("significant_bh", lambda v: v.sum(min_count=1)),
        partial=("rho_partial", "mean"),
        partial_atypical=("rho_partial_atypical", "mean"),
        shuffled=("rho_shuffled", "mean"),
        atypical_significant=("atypical_significant", lambda v: v.sum(min_count=1)),
    )
    g["significant_bh"] = g["significant_bh"].astype("Int64")
    g["atypical_significant"] = g["atypical_significant"].astype("Int64")
    g["same_sign"] = (g["min_rho"] > 0) | (g["max_rho"] < 0)
    return g.reindex(g["mean_rho"].abs().sort_values(ascending=False).index).reset_index()


@identified
def run(
    model: Model,
    cfg: GeometriesConfig,
    *,
    out: str | Path | None = None,
    log: str | Path | None = None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: Callable[[str, pd.DataFrame], Any] | None = None,
) -> GeometriesResult:
    """The quantities and relations of every block of ``units`` (default all). With ``out`` the pool is kept
    in ``out/<pool>`` (and reused), and each block's rows are merged into the tables as soon as they are done:
    a rerun skips the blocks already there. ``log`` is unused (the tables are the log)."""
    check_support(model, "attn", "mlp", "value_excl_self")  # the sites it reads: refused before any work
    layers = cfg.chosen_layers(model.cfg.n_layers)
    chosen = layers if units is None else sorted({int(u[1]) for u in units})
    bad = sorted(set(chosen) - set(layers))
    if bad:
        raise InputError(f"units {[('layer', l) for l in bad]} are not blocks of this config ({layers})")
    if cfg.seq_len > model.cfg.n_ctx:
        raise InputError(f"seq_len {cfg.seq_len} exceeds the model's context of {model.cfg.n_ctx} tokens")
    windows = token_windows(model, cfg)
    _check_pool(len(windows), windows.shape[1], cfg.k)
    settings = {
        "model": model_label(model),
        "corpus": cfg.corpus,
        "seq_len": cfg.seq_len,
        "n_tokens": int(windows.shape[0] * (windows.shape[1] - 1)),
        "delta": cfg.delta,
        "seeds": cfg.seeds,
        "k": cfg.k,
        "seed": cfg.seed,
        "inputs": content_digest(windows),
    }  # another text: computed again
    identity = run_identity(model)
    earlier = _earlier(out, settings, chosen, identity.row())
    done = set(earlier["relations"]["layer"].astype(int)) if earlier else set()
    todo = [l for l in chosen if l not in done]
    tables: dict[str, list[pd.DataFrame]] = {n: [df] for n, df in earlier.items()}
    if todo:
        name = f"geometries-pool-{cfg.corpus}-{cfg.seq_len}x{len(windows)}-{identity.key}-{settings['inputs'][:8]}"
        with tempfile.TemporaryDirectory(prefix="geometries-") if out is None else nullcontext(out) as base:
            pool = collect_pool(
                model, windows, Path(base) / name, dtype="float32", batch_size=cfg.batch_size, progress=progress
            )
            base_rows, resid = clean_pass(model, windows, todo, cfg.batch_size)
            profile = decomposition_quantities(model, windows, todo, cfg.batch_size)  # one pass, every block
            for l in todo:
                if progress:
                    print(f"geometries: block {l}")
                part = _layer_tokens(model, cfg, pool, windows, base_rows, resid, profile, l)
                rel = relations(part, n_boot=cfg.n_boot, seed=cfg.seed)
                done = {name_: _labelled(df, settings) for name_, df in (("tokens", part), ("relations", rel))}
                for name_, df in done.items():
                    tables.setdefault(name_, []).append(df)
                # the relations' q so far: over the blocks done (final below); the tokens shown
                GeometriesResult(tokens=done["tokens"]).deliver(out, on_table, identity=run_identity(model).row())
                GeometriesResult(relations=done["relations"]).deliver(out, identity=run_identity(model).row())
    merged = {
        n: pd.concat(v, ignore_index=True).sort_values(["layer"], kind="stable").reset_index(drop=True) if v else None
        for n, v in tables.items()
    }
    if merged.get("relations") is not None:  # earlier blocks' rows carry the identity, this run's not yet: one run
        merged["relations"] = merged["relations"].drop(columns=[c for c in IDENTITY if c in merged["relations"]])
    res = GeometriesResult(**merged)  # q over every block of the run, and the summary
    if res.relations is not None:  # every block's q over all the blocks of this run; the summary over them
        # (also when every block was resumed: a run killed before this line left the per-block q of its
        # blocks so far in the file); shown when a block was computed
        GeometriesResult(relations=res.relations, summary=res.summary).deliver(
            out,
            (lambda n, df: on_table(n, df) if n == "relations" else None) if todo and on_table else None,
            identity=run_identity(model).row(),
        )
    return res


def _check_pool(n_windows: int, seq_len: int, k: int) -> None:
    others = (n_windows - 1) * (seq_len - 1)  # the neighbours a token's fit may take
    if others < k:
        raise InputError(
            f"the pool has {n_windows} window(s) of {seq_len} tokens: a token's local fit takes its {k} "
            f"neighbours from other windows, which hold {others}; give more --tokens, a shorter "
            "--seq-len or a smaller --k"
        )


def _labelled(df: pd.DataFrame, settings: dict) -> pd.DataFrame:
    return pd.concat([pd.DataFrame({k: [v] * len(df) for k, v in settings.items()}, index=df.index), df], axis=1)


def _earlier(out, settings: dict, chosen: Sequence[int], identity: dict) -> dict[str, pd.DataFrame]:
    """The rows of ``chosen`` blocks an earlier run of this model's ``identity`` with these settings left
    in ``out`` (``{}`` if none)."""
    if out is None or not (Path(out) / GeometriesResult.table("relations").filename).exists():
        return {}
    old = GeometriesResult.load(out)
    if old.relations is None or old.tokens is None:
        return {}
    got = {}
    for name in ("tokens", "relations"):
        df = of_identity(getattr(old, name), identity)
        keep = df["layer"].isin(chosen)
        for k, v in settings.items():
            if k != "inputs":
                keep &= df[k] == v
        same = keep & (df["inputs"] == settings["inputs"]) if "inputs" in df.columns else keep & False
        if name == "relations":  # the same settings measured on other tokens: computed again, and said
            note_recomputed(Path(out) / GeometriesResult.table(name).filename, int((keep & ~same).sum()))
        got[name] = df[same]
    # a block is done when both tables hold all its rows (a table cut short on disk keeps part of a block)
    tokens, pairs = got["tokens"].groupby("layer").size(), got["relations"].groupby("layer").size()
    whole = len(ALL) * (len(ALL) - 1) // 2
    done = {l for l in pairs.index if pairs[l] == whole and tokens.get(l, 0) == settings["n_tokens"]}
    return {n: df[df["layer"].isin(done)] for n, df in got.items()} if done else {}


def _layer_tokens(
    model, cfg, pool, windows, base_rows: pd.DataFrame, resid, profile: pd.DataFrame, layer: int
) -> pd.DataFrame:
    """Every quantity of block ``layer`` per pool token, with the token's window, position, id and frequency
    (``profile``: the decomposition quantities of every block to do, from one pass)."""
    parts = [
        profile[profile["layer"] == layer],
        damage_quantities(
            model,
            windows,
            base_rows["nll"].to_numpy(),
            resid,
            [layer],
            delta=cfg.delta,
            seeds=cfg.seeds,
            seed=cfg.seed,
            batch_size=cfg.batch_size,
        ),
        pdsf_quantities(model, pool, base_rows["predicted"].to_numpy(), [layer]),
        tokenwise_quantities(pool, [layer], k=cfg.k, ridge=cfg.ridge),
    ]
    parts.append(atypicality_quantities(pool, [layer], k=cfg.k))  # after the fit: its neighbours are cached
    df = base_rows[["index", "window", "position", "token", "text", "log_freq"]].assign(layer=layer)
    for p in parts:
        df = df.merge(p, on=["layer", "index"], how="left")
    return df[["layer", "index", "window", "position", "token", "text", "log_freq", *ALL, *ATYPICALITY]]


# ---------------------------------------------------------------------------
# what a run costs (tlgeo plan): the pool, the clean pass, the profile, the perturbed passes, the fits
# ---------------------------------------------------------------------------

# the relations' bootstrap (n_boot + 11 Spearman matrices of the quantities per block) is not counted; the pool-wide
# PDSF fit (two SVDs of [tokens, d_model], ~8 n d^2 FLOPs) is host FLOPs (the calibration's "host.flop")
PDSF_FIT_FLOPS = 8  # x tokens x d_model^2


def plan(shape, cfg: GeometriesConfig) -> list:
    """The pool (float32, every state) and a clean pass over its windows; the decomposition profile of
    the blocks measured (one pass, three sites); per block, ``2 x seeds`` passes resumed at it (the
    damage); the PDSF readout of every pool state at each block (the unembedding alone); per block the
    host work: the tokenwise kNN and linear fits (:func:`tlgeo.tokenwise.analysis.fit_work`) and the
    PDSF fit (the relations' bootstrap is not counted: see above)."""
    import dataclasses

    from ..decomposition.analysis import profile_work
    from ..planner import PPL_LOGIT_COPIES, Work
    from ..tokenwise.analysis import KNN_CHUNK_COPIES, fit_work, pool_size

    layers = cfg.chosen_layers(shape.n_layers)
    n, d, seq, b = shape.n_layers, shape.d_model, cfg.seq_len, cfg.batch_size
    if seq > shape.n_ctx:
        raise InputError(f"seq_len {seq} exceeds the model's context of {shape.n_ctx} tokens")
    n_win, n_tok = pool_size(cfg.tokens, seq)
    _check_pool(n_win, seq, cfg.k)
    tokens = n_win * seq
    share = len(layers) / n  # the profile's observers and statistics at the measured blocks only
    sites = ("attn", "mlp", "value_excl_self")
    profile = profile_work(shape, sites, tokens, seq, b)
    profile = dataclasses.replace(
        profile,
        hooks={k: v * share for k, v in profile.hooks.items()},
        kept_bytes=profile.kept_bytes * share,
        note=profile.note + f" at {len(layers)} blocks",
    )
    passes = 2 * cfg.seeds * len(layers)
    host = fit_work(shape, n_tok, ("linear",), cfg.k, len(layers))
    host["host.flop"] = host.get("host.flop", 0.0) + len(layers) * PDSF_FIT_FLOPS * n_tok * d * d
    return [
        Work(
            "pool",
            tokens,
            seq,
            b,
            kept_bytes=min(b, n_win) * seq * (n + 1) * d * 4,
            host_bytes=n_tok * (n + 1) * d * 4,
            note=f"{n_tok} tokens x {n + 1} states, float32, memory-mapped",
        ),
        Work(
            "clean pass",
            tokens,
            seq,
            b,
            logit_copies=PPL_LOGIT_COPIES,
            host_bytes=tokens * d * 4 * len(layers),
            note=f"the residual at {len(layers)} blocks kept (host)",
        ),
        profile,
        Work(
            "damage",
            tokens * passes,
            seq,
            b,
            blocks=sum((n - l) / n for l in layers) / len(layers),
            logit_copies=PPL_LOGIT_COPIES,
            host_bytes=tokens * d * 4 * len(layers),
            note=f"{passes} passes resumed at the measured blocks",
        ),
        Work(
            "PDSF readout",
            n_tok * len(layers),
            1,
            256,
            blocks=0.0,
            logit_copies=2.0,
            note=f"every pool state at {len(layers)} blocks through the unembedding",
        ),
        Work(
            "fits",
            0,
            1,
            host=host,
            host_bytes=2 * n_tok * d * 4 + n_tok * cfg.k * 8 + KNN_CHUNK_COPIES * min(1024, n_tok) * n_tok * 4,
            note=f"tokenwise kNN + linear fits and PDSF fits at {len(layers)} blocks (host)",
        ),
    ]


ANALYSIS = register_analysis(
    Analysis(
        name="geometries",
        config=GeometriesConfig,
        run=run,
        result=GeometriesResult,
        units=units,
        description="one token, four geometries: the four analyses' per-token quantities on one pool, related",
        tiny=dict(tokens=60, seq_len=16, layer_count=2, seeds=1, k=8, n_boot=20, batch_size=4),
        plan=plan,
        docs="analyses/geometries",
    )
)
