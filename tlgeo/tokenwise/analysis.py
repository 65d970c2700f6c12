"""The tokenwise analysis of one model, on the analysis contract:
``run(model, TokenwiseConfig(...)) -> TokenwiseResult``.

:func:`run` collects the state pool (:func:`tlgeo.tokenwise.pool.collect_pool`, into ``out`` or a
temporary folder) and calls :func:`tokenwise_analysis`, which works on a collected
:class:`~tlgeo.tokenwise.pool.StatePool`:

1. per layer and class, the fit of every pool token and the medians of its
   geometry (:func:`tlgeo.tokenwise.fits.layer_geometry`'s columns), plus the
   relative error of a fixed random subset of ``patch_tokens`` tokens;
2. per class, the KL of patching each subset token's ``h_{l+1}`` to its
   approximation at every patched layer (:func:`tlgeo.tokenwise.output_kl.patch_kl`);
3. per (layer, class), Spearman(error, KL) with a bootstrap CI over windows.

Work units: ``(class, layer)`` for every class and fitted layer. A unit's geometry row, its
patching KL (when the layer is patched) and its Spearman rows depend on no other unit: the
local fits of one token use only its own neighbourhood, the pool-wide maps are fitted per layer,
the patched subset is the same for every unit (``seed``), and the KL of patching layer ``l`` is
measured against the same clean run whatever other layers are patched beside it. So a run over
some units followed by :meth:`TokenwiseResult.merge` equals a run over all of them.

Each (layer, class) geometry row and each class's patching (for the layers patched in that call)
is one line of the resume log; a patching stage also resumes from earlier lines of the same class
and settings that together hold its layers.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..runner.distributed import all_ranks_busy, ranks
from ..families import Family, Support
from ..runner.analysis import Analysis, Result, Table, register_analysis
from ..geometry.local_maps import fit_local
from ..models import Model, model_label
from ..runner.identity import identified, run_identity
from ..runner.results import ResultLog, content_digest
from ..stats.correlation import spearman_ci
from .config import TokenwiseConfig
from .fits import POOL_CLASSES, geometry_row, layer_outputs, local_params, neighbours, tokenwise_outputs
from .paper import PAPER
from .output_kl import patch_kl_sets
from .pool import StatePool, collect_pool, n_layer_maps

__all__ = ["PAPER", "KEY", "TokenwiseResult", "tokenwise_analysis", "run", "units", "pool_windows", "LOG"]

KEY = (
    "model",
    "corpus",
    "seq_len",
    "n_tokens",
    "k",
    "exclude_sequence",
    "rank",
    "patch_tokens",
    "seed",
)  # of every row
LOG = "tokenwise.jsonl"  # the resume log's name in ``log`` (default ``out``)
_META = (
    "k",
    "exclude_sequence",
    "rank",
    "patch_tokens",
    "seed",
    "n_tokens",
)  # geometry columns added to the other tables


@dataclass
class TokenwiseResult(Result):
    """``geometry`` (one row per layer and class), ``correlation`` (Spearman per layer, class and
    target) and ``tokens`` (the patched subset: error and KL per token, layer and class).

    From :func:`run` every row carries the settings of :data:`KEY` (model, corpus, window length
    and the fit's settings); from :func:`tokenwise_analysis` on a pool, only the fit's."""

    geometry: pd.DataFrame | None = None
    correlation: pd.DataFrame | None = None
    tokens: pd.DataFrame | None = None

    TABLES = (
        Table("geometry", (*KEY, "layer", "class"), "tokenwise_geometry.csv"),
        Table("correlation", (*KEY, "layer", "class", "target"), "tokenwise_correlation.csv"),
        Table("tokens", (*KEY, "layer", "class", "index"), "tokenwise_tokens.csv.gz"),
    )


def _subset_outputs(pool: StatePool, layer: int, kind: str, subset: np.ndarray, **kw) -> Float[Tensor, "n d"]:
    """``T(h_layer)`` of the subset tokens only (their neighbours come from the cache): for a
    patching stage resumed after the geometry stage was read from the log."""
    h_in, h_out = pool.pair(layer)
    if kind in POOL_CLASSES:
        return tokenwise_outputs(pool, layer, kind, ridge=kw["ridge"])[torch.as_tensor(subset)]
    nb = neighbours(pool, layer, kw["k"], exclude_sequence=kw["exclude_sequence"])[subset]
    return fit_local(
        kind, h_in[nb], h_out[nb], h_in[torch.as_tensor(subset), None], **local_params(kind, kw["rank"], kw["ridge"])
    )[:, 0].float()


def _same(row: dict, settings: dict) -> bool:
    return all(json.dumps(row.get(k), sort_keys=True) == json.dumps(v, sort_keys=True) for k, v in settings.items())


def _patching_from_log(log: ResultLog, kind: str, settings: dict, layers: list[int]) -> dict | None:
    """A patching row for ``layers`` put together from the log's patching rows of the same class and
    settings (e.g. of runs over other units), or ``None`` when they do not hold every layer."""
    per_layer: dict[int, list[tuple]] = {}
    for r in log.rows:
        if r.get("stage") != "patching" or r.get("class") != kind or not _same(r, settings):
            continue
        got: dict[int, list[tuple]] = {}
        for l, i, a, b in zip(r["layers"], r["index"], r["kl"], r["kl_following"]):
            if l in layers:
                got.setdefault(l, []).append((i, a, b))
        for l, v in got.items():
            per_layer.setdefault(l, v)
    if set(per_layer) != set(layers):
        return None
    flat = [(l, *t) for l in layers for t in per_layer[l]]
    return {
        "layers": [t[0] for t in flat],
        "index": [t[1] for t in flat],
        "kl": [t[2] for t in flat],
        "kl_following": [t[3] for t in flat],
    }


def _config(cfg: TokenwiseConfig | None, kwargs: dict) -> TokenwiseConfig:
    """``cfg``, or one made of its fields given as keyword arguments (not both)."""
    if cfg is None:
        return TokenwiseConfig(**kwargs)
    if kwargs:
        raise TypeError(f"give a TokenwiseConfig or its keyword arguments, not both ({sorted(kwargs)})")
    return cfg


def _chosen_units(cfg: TokenwiseConfig, layers: list[int], units: Sequence[tuple] | None) -> set[tuple] | None:
    """``units`` as a set of ``(class, layer)`` pairs (``None``: all); unknown pairs raise."""
    chosen = None if units is None else {tuple(u) for u in units}
    unknown = sorted(chosen - {(c, l) for c in cfg.classes for l in layers}) if chosen is not None else []
    if unknown:
        raise InputError(f"units {unknown} are not (class, layer) pairs of this config")
    return chosen


def _wanted(chosen: set[tuple] | None, c: str, l: int) -> bool:
    """Whether the unit ``(c, l)`` is among ``chosen`` (``None``: all units are)."""
    return chosen is None or (c, l) in chosen


def _settings(cfg: TokenwiseConfig, pool: StatePool) -> dict:
    """The fit's settings and the pool's digest: the resume log's key beside stage, layer and class."""
    return {
        "k": cfg.k,
        "exclude_sequence": cfg.exclude_sequence,
        "rank": cfg.rank,
        "ridge": cfg.ridge,
        "energy": cfg.energy,
        "patch_tokens": cfg.patch_tokens,
        "seed": cfg.seed,
        "n_tokens": pool.n_tokens,
        "inputs": content_digest(pool.windows),
    }  # the pool's tokens: another text is computed again


def _fit_kw(cfg: TokenwiseConfig) -> dict:
    """The local fits' keyword arguments of ``cfg``."""
    return dict(k=cfg.k, exclude_sequence=cfg.exclude_sequence, rank=cfg.rank, ridge=cfg.ridge)


def _open_log(log_path: str | os.PathLike | None, model: Model, settings: dict) -> ResultLog | None:
    """The resume log at ``log_path`` keyed by stage, layer, class and ``settings`` (``None`` without a path)."""
    if not log_path:
        return None
    return ResultLog(
        log_path,
        key=("stage", "layer", "class", *settings, "patch_layers"),
        identity=run_identity(model).row(),
        content=("inputs",),
    )


def _geometry_stage(
    pool: StatePool,
    cfg: TokenwiseConfig,
    layers: list[int],
    chosen: set[tuple] | None,
    settings: dict,
    log: ResultLog | None,
    subset: np.ndarray,
    progress: bool,
) -> tuple[list[dict], dict[tuple[int, str], torch.Tensor]]:
    """The geometry row of every chosen unit (from the log or fitted), and the subset outputs fitted here."""
    kw = _fit_kw(cfg)
    geo_rows = []
    fitted: dict[tuple[int, str], torch.Tensor] = {}  # subset outputs fitted in this call, reused for patching
    it = [l for l in layers if any(_wanted(chosen, c, l) for c in cfg.classes)]
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc="tokenwise fits", leave=False)
    sub = torch.as_tensor(subset)
    for l in it:
        classes = [c for c in cfg.classes if _wanted(chosen, c, l)]
        keys = {c: {"stage": "geometry", "layer": l, "class": c, **settings, "patch_layers": None} for c in classes}
        rows = {c: log.get(**keys[c]) if log else None for c in classes}
        todo = [c for c in classes if rows[c] is None]
        if todo:
            h_in, h_out = pool.pair(l)
            outs = layer_outputs(pool, l, todo, threads=cfg.fit_workers, **kw)
            for c, t in outs.items():
                fitted[(l, c)] = t[sub]
                summary, g = geometry_row(h_in, h_out, t, cfg.energy)
                rows[c] = {
                    **keys[c],
                    **summary,
                    "subset_error": g.rel_error[sub].tolist(),
                    "subset_angle": g.residual_angle[sub].tolist(),
                }
                if log:
                    log.add(rows[c])
        geo_rows += [rows[c] for c in classes]
    return geo_rows, fitted


def _geometry_table(geo_rows: list[dict]) -> pd.DataFrame:
    """The geometry table: the rows without the subset's per-token lists and the log's bookkeeping."""
    hidden = ("stage", "patch_layers", "inputs")
    return pd.DataFrame(
        [{k2: v for k2, v in r.items() if not k2.startswith("subset_") and k2 not in hidden} for r in geo_rows]
    )


def _patching_stage(
    model: Model,
    pool: StatePool,
    cfg: TokenwiseConfig,
    patch_layers: list[int],
    chosen: set[tuple] | None,
    settings: dict,
    log: ResultLog | None,
    subset: np.ndarray,
    fitted: dict[tuple[int, str], torch.Tensor],
    progress: bool,
) -> dict[str, dict]:
    """Per class with a chosen patched layer, its patching row (from the log or measured; ``fitted`` is emptied)."""
    kw = _fit_kw(cfg)
    keys, done, todo = {}, {}, {}
    for c in cfg.classes:
        patched = [l for l in patch_layers if _wanted(chosen, c, l)]
        if not patched:
            continue
        keys[c] = {"stage": "patching", "layer": -1, "class": c, **settings, "patch_layers": patched}
        done[c] = (log.get(**keys[c]) or _patching_from_log(log, c, settings, patched)) if log else None
        if done[c] is None:
            reps = {l: fitted.pop((l, c), None) for l in patched}
            todo[c] = {l: r if r is not None else _subset_outputs(pool, l, c, subset, **kw) for l, r in reps.items()}
    if todo:  # every class's patches in one pass: each batch's clean forward is shared
        df = patch_kl_sets(model, pool, subset, todo, batch_size=cfg.batch_size, progress=progress)
        for c, got in df.groupby("set", sort=False):
            done[c] = {
                **keys[c],
                "kl": got["kl"].tolist(),
                "kl_following": got["kl_following"].tolist(),
                "layers": got["layer"].tolist(),
                "index": got["index"].tolist(),
            }
            if log:
                log.add(done[c])
    return done


def _tokens_table(done: dict[str, dict], geo_rows: list[dict], subset: np.ndarray, pool: StatePool) -> pd.DataFrame:
    """The patched subset's KL per token, layer and class, with its error, residual angle and window."""
    tokens = pd.concat(
        [
            pd.DataFrame(
                {
                    "class": c,
                    "layer": row["layers"],
                    "index": row["index"],
                    "kl": row["kl"],
                    "kl_following": row["kl_following"],
                }
            )
            for c, row in done.items()
        ],
        ignore_index=True,
    )
    errors = pd.concat(
        [
            pd.DataFrame(
                {
                    "class": r["class"],
                    "layer": r["layer"],
                    "index": subset,
                    "rel_error": r["subset_error"],
                    "residual_angle": r["subset_angle"],
                }
            )
            for r in geo_rows
        ],
        ignore_index=True,
    )
    tokens = tokens.merge(errors, on=["class", "layer", "index"])
    tokens["window"] = pool.window[tokens["index"].to_numpy()]
    return tokens


def _correlation_table(tokens: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """Spearman(error, KL) per (layer, class) and target, with a bootstrap CI over windows."""
    corr = []
    for (l, c), g in tokens.groupby(["layer", "class"]):
        for target in ("kl", "kl_following"):
            s = spearman_ci(g["rel_error"], g[target], groups=g["window"], n_boot=n_boot, seed=seed)
            corr.append(
                {
                    "layer": l,
                    "class": c,
                    "target": target,
                    "spearman": s.rho,
                    "ci_low": s.ci_low,
                    "ci_high": s.ci_high,
                    "n": s.n,
                }
            )
    return pd.DataFrame(corr)


def tokenwise_analysis(
    model: Model,
    pool: StatePool,
    cfg: TokenwiseConfig | None = None,
    *,
    log_path: str | os.PathLike | None = None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: Callable[[str, pd.DataFrame], Any] | None = None,
    **kwargs: Any,
) -> TokenwiseResult:
    """Geometry, patching KL and Spearman(error, KL) of ``pool`` under ``cfg`` (``corpus``, ``tokens``,
    ``seq_len`` and ``pool_dtype`` describe the pool and are not used here), on ``units`` (``(class,
    layer)`` pairs; default all). Instead of ``cfg``, its fields as keyword arguments. ``log_path``: the
    resume log.
    ``on_table(name, df)`` is called when the geometry is done, then with the tokens and the
    correlation."""
    cfg = _config(cfg, kwargs)
    layers = cfg.fitted_layers(pool.n_layers)
    patch_layers = cfg.patched_layers(pool.n_layers)
    if cfg.patch_tokens > pool.n_tokens:
        raise InputError(
            f"patch_tokens must be between 3 and the pool's {pool.n_tokens} tokens, got {cfg.patch_tokens}"
        )
    chosen = _chosen_units(cfg, layers, units)
    subset = np.sort(np.random.default_rng(cfg.seed).choice(pool.n_tokens, cfg.patch_tokens, replace=False))
    settings = _settings(cfg, pool)
    log = _open_log(log_path, model, settings)

    geo_rows, fitted = _geometry_stage(pool, cfg, layers, chosen, settings, log, subset, progress)
    geometry = _geometry_table(geo_rows)
    if on_table is not None:
        on_table("geometry", geometry)

    done = _patching_stage(model, pool, cfg, patch_layers, chosen, settings, log, subset, fitted, progress)
    if not done:  # only unpatched layers among the units
        return TokenwiseResult(geometry=geometry)
    tokens = _tokens_table(done, geo_rows, subset, pool)
    if on_table is not None:
        on_table("tokens", tokens)

    correlation = _correlation_table(tokens, cfg.n_boot, cfg.seed)
    if on_table is not None:
        on_table("correlation", correlation)
    return TokenwiseResult(geometry=geometry, correlation=correlation, tokens=tokens)


def pool_windows(model: Model, cfg: TokenwiseConfig, text: str | None = None) -> Int[Tensor, "n seq"]:
    """The token windows of the pool: ``seq_len`` tokens each from the start of ``text`` (default: the
    config's corpus), enough for ``tokens`` states (the first position of each is left out)."""
    from ..data import load_text
    from ..evals.perplexity import corpus_batches

    text = load_text(cfg.corpus) if text is None else text
    windows = corpus_batches(model, text, cfg.seq_len, cfg.tokens + cfg.seq_len)
    return windows[: max(1, -(-cfg.tokens // (cfg.seq_len - 1)))]


def units(model: Model, cfg: TokenwiseConfig) -> list[tuple[str, int]]:
    """``(class, layer)`` for every class and fitted layer map."""
    return [(c, l) for c in cfg.classes for l in cfg.fitted_layers(n_layer_maps(model))]


def _labelled(name: str, df: pd.DataFrame, settings: dict, meta: dict) -> pd.DataFrame:
    """A table with the columns of :data:`KEY` that the pool analysis does not know, in the old CLI's order."""
    return df.assign(**settings) if name == "geometry" else df.assign(**settings, **meta)


@identified
def run(
    model: Model,
    cfg: TokenwiseConfig,
    *,
    out: str | Path | None = None,
    log: str | Path | None = None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: Callable[[str, pd.DataFrame], Any] | None = None,
) -> TokenwiseResult:
    """The pool of ``cfg`` (collected into ``out/<cfg.pool_name(identity)>``, resumed and reused there; in a
    temporary folder when ``out`` is None), then :func:`tokenwise_analysis` on ``units`` (default
    all), with ``patch_tokens`` at most the pool's tokens. With ``out`` each table is merged into it as
    soon as it is done; the resume log is ``<log>/tokenwise.jsonl`` (default ``out``).
    ``on_table(name, df)`` is called after each table (the CLI prints them)."""
    n_maps = n_layer_maps(model)
    cfg.patched_layers(n_maps)  # layers out of range fail before any work, and so do unknown units
    bad = sorted({tuple(u) for u in units or ()} - {(c, l) for c in cfg.classes for l in cfg.fitted_layers(n_maps)})
    if bad:
        raise InputError(f"units {bad} are not (class, layer) pairs of this config")
    n_ctx = model.cfg.n_ctx
    if cfg.seq_len > n_ctx:
        raise InputError(f"seq_len {cfg.seq_len} exceeds the model's context of {n_ctx} tokens")
    windows = pool_windows(model, cfg)
    log_dir = Path(log) if log is not None else (Path(out) if out is not None else None)
    label = model_label(model)
    settings = {"model": label, "corpus": cfg.corpus, "seq_len": cfg.seq_len}
    with tempfile.TemporaryDirectory(prefix="tokenwise-") if out is None else nullcontext(out) as base:
        pool_dir = Path(base) / cfg.pool_name(run_identity(model).key, content_digest(windows))
        if progress:
            print(f"collecting {len(windows)} windows x {cfg.seq_len} tokens at every layer into {pool_dir}")
        r = ranks()  # under torchrun each rank collects its share of the pool, then they all-gather it
        pool = collect_pool(
            model,
            windows,
            pool_dir,
            dtype=cfg.pool_dtype,
            batch_size=cfg.batch_size,
            progress=progress,
            ranks=r if r.size > 1 and all_ranks_busy() else None,
        )
        cfg = cfg.replace(patch_tokens=min(cfg.patch_tokens, pool.n_tokens))
        meta = {
            "k": cfg.k,
            "exclude_sequence": cfg.exclude_sequence,
            "rank": cfg.rank,
            "patch_tokens": cfg.patch_tokens,
            "seed": cfg.seed,
            "n_tokens": pool.n_tokens,
        }

        def done(name: str, df: pd.DataFrame) -> None:
            TokenwiseResult(**{name: _labelled(name, df, settings, meta)}).deliver(
                out, on_table, identity=run_identity(model).row()
            )

        res = tokenwise_analysis(
            model,
            pool,
            cfg,
            log_path=log_dir / LOG if log_dir is not None else None,
            units=units,
            progress=progress,
            on_table=done,
        )
    return TokenwiseResult(**{n: _labelled(n, df, settings, meta) for n, df in res.tables().items()})


# ---------------------------------------------------------------------------
# what a run costs (tlgeo plan): the pool's forwards, the fits, the patched forwards
# ---------------------------------------------------------------------------

# the fits' host work, priced by the planner's calibration table (tlgeo.planner.calibration): kNN
# ("tokenwise.knn", per n^2 x d_model), each local class's fit ("tokenwise.fit.<class>", per n x d_model x k^2: its
# Gram matrices), each class's fixed work per layer ("tokenwise.fit_class", per d_model: the geometry row, reading the
# layer pair, the log) and the pool-wide maps' FLOPs ("host.flop")
LOCAL_CLASSES = ("orthogonal", "lowrank", "linear", "diag_psd")
KNN_CHUNK_COPIES = 2.6  # kNN's peak, +207 MiB at 20,066 tokens (RESULTS section 4): 2.6 [1024, n] float32 chunks
MLP_EPOCHS, MLP_HIDDEN = 10, 256  # fits.fit_mlp's defaults


def pool_size(tokens: int, seq_len: int) -> tuple[int, int]:
    """``(windows, pool tokens)`` of a pool of ``tokens`` tokens in windows of ``seq_len``, each with its
    BOS left out (:func:`pool_windows`, from a corpus long enough)."""
    from ..planner import windows

    n_tokens = windows(tokens, seq_len - 1)
    return n_tokens // (seq_len - 1), n_tokens


def fit_work(shape, n_tokens: int, classes: Sequence[str], k: int, layers: int = 1) -> dict[str, float]:
    """The host work of ``layers`` layers' fits of ``classes`` on ``n_tokens`` pool tokens, as amounts of the
    calibrated kinds above (:class:`tlgeo.planner.Work`'s ``host``)."""
    d = shape.d_model
    local = [c for c in classes if c in LOCAL_CLASSES]
    out = {"tokenwise.fit_class": len(classes) * d}
    if local:
        out["tokenwise.knn"] = n_tokens**2 * d
        out.update({f"tokenwise.fit.{c}": n_tokens * d * k**2 for c in local})
    flops = 0.0
    if "global" in classes:  # the two folds' Gram matrices and solves
        flops += 4 * n_tokens * d * d + 2 * d**3
    if "mlp" in classes:  # forward and backward of the residual MLP, every token once per epoch
        flops += MLP_EPOCHS * 12 * n_tokens * d * MLP_HIDDEN
    if flops:
        out["host.flop"] = flops
    return {kind: layers * amount for kind, amount in out.items()}


def plan(shape, cfg: TokenwiseConfig) -> list:
    """The pool (one forward per batch of windows, every state kept, memory-mapped), the fits of every
    fitted layer (host work: kNN and the local fits, the pool-wide maps), and per class the patched
    forwards: a clean forward per batch of patched tokens, then one resumed at each patched layer
    ``l`` (``(n - l) / n`` of the blocks) and read out only where the patch can change the logits.
    The Spearman bootstraps (scipy on the host, per patched layer and class) are not counted."""
    from ..planner import PPL_LOGIT_COPIES, Work
    from .output_kl import LOGIT_BUDGET

    n_layers, d, seq = shape.n_layers, shape.d_model, cfg.seq_len
    if seq > shape.n_ctx:
        raise InputError(f"seq_len {seq} exceeds the model's context of {shape.n_ctx} tokens")
    layers, patched = cfg.fitted_layers(n_layers), cfg.patched_layers(n_layers)
    n_win, n_tok = pool_size(cfg.tokens, seq)
    item = 2 if cfg.pool_dtype == "float16" else 4
    cached = min(cfg.batch_size, n_win) * seq * (n_layers + 1) * d * 4  # a batch's states, every layer
    out = [
        Work(
            "pool",
            n_win * seq,
            seq,
            cfg.batch_size,
            kept_bytes=cached,
            logit_copies=0.0,
            readout=0.0,
            host_bytes=n_tok * (n_layers + 1) * d * item,
            note=f"{n_tok} tokens x {n_layers + 1} states, {cfg.pool_dtype}, memory-mapped",
        )
    ]
    out.append(
        Work(
            "fits",
            0,
            1,
            host=fit_work(shape, n_tok, cfg.classes, cfg.k, len(layers)),
            host_bytes=(2 + len(cfg.classes)) * n_tok * d * 4
            + n_tok * cfg.k * 8
            + KNN_CHUNK_COPIES * min(1024, n_tok) * n_tok * 4,
            note=f"{len(cfg.classes)} class(es) at {len(layers)} layer(s) (host)",
        )
    )
    rows = min(cfg.patch_tokens, n_tok)
    resumed = sum((n_layers - l) / n_layers for l in patched)  # full forwards' worth of blocks, per patched token
    tokens = rows * seq * (1 + len(patched))
    batch = max(1, min(cfg.batch_size, LOGIT_BUDGET // (seq * shape.vocab)))
    c = len(cfg.classes)
    out.append(
        Work(
            "patching",
            c * tokens,
            seq,
            batch,
            blocks=rows * seq * (1 + resumed) / tokens,
            readout=(rows * seq + rows * len(patched) * seq / 2) / tokens,
            logit_copies=PPL_LOGIT_COPIES,
            kept_bytes=batch * seq * d * 4 * (len(patched) + 1),
            note=f"{c} class(es) x {rows} tokens at {len(patched)} layer(s), resumed",
        )
    )
    return out


def support(family: Family) -> Support:
    """Tokenwise layer maps on ``family``: residual states and the unembedding, on every family."""
    return Support("yes")


ANALYSIS = register_analysis(
    Analysis(
        "tokenwise",
        TokenwiseConfig,
        run,
        TokenwiseResult,
        units,
        "tokenwise layer maps: local kNN fits of h_{l+1} ~ A(x) x and what they leave (seed paper 002)",
        tiny=dict(
            tokens=120,
            seq_len=16,
            classes=("diag_psd", "linear"),
            k=8,
            patch_tokens=12,
            n_boot=20,
            fit_workers=1,
            batch_size=4,
        ),
        plan=plan,
        support=support,
        docs="analyses/tokenwise",
    )
)
