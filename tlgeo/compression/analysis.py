"""The compression diagnosis of one model, on the analysis contract:
``run(model, CompressionConfig(...)) -> CompressionResult``.

Work units: the compressed methods. Each method's rows (per prompt, per layer, across layers,
its timing) depend only on the dense model, that method's compressed model and the prompts,
so a run over some methods followed by :meth:`CompressionResult.merge` equals a run over all of them.
Compressed models are read from ``<root>/<method>``; with ``cfg.compress`` a missing one is
compressed first (:func:`tlgeo.compression.compress.ensure_compressed`), so a run needs no
folder prepared (the registered tiny config does this on a tiny model in seconds).

Resuming: each finished method's per-prompt rows go to ``<log>/diag_prompts.csv.gz`` (with
their settings and the id of the compressed model) and its time to ``<log>/timing.csv`` (``log``
defaults to ``out``); a rerun takes a method from there when its rows were made with the same
prompts, corpus and base model and on the same compressed model, and recomputes it when that
model changed. Rows of other prompts, corpus or base model in the same folder stop the run.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from ..errors import InputError
from ..families import Family, Support
from ..runner.analysis import Analysis, Result, Table, register_analysis
from ..models import Model, model_label
from ..runner.identity import identified, run_identity
from ..runner.results import of_identity, read_table
from ..storage import folder_lock
from .config import CompressConfig, CompressionConfig

__all__ = ["CompressionResult", "run", "units", "loaded_key", "default_root", "SETTINGS"]

PROMPT_KEY = ("method", "mode", "site", "layer", "tokens", "prompt")
# the settings stored with every per-prompt row (the first two as the old files had them)
SETTINGS = ("n_prompts_cfg", "seq_len_cfg", "corpus_cfg", "base_cfg")
MODEL_COLUMN = "model_cfg"  # the id of the compressed model the row was computed on


@dataclass
class CompressionResult(Result):
    """``prompts``: per (method, mode, site, layer, tokens, prompt) the error ratios of
    :func:`tlgeo.compression.decompose.prompt_ratios` with their settings; ``layers``: mean and
    SD over prompts per layer (Figure 6's data); ``table12``: the across-layer statistics per
    method, mode, site, tokens and reference (``delta`` or ``z``); ``timing``: wall seconds of
    each method's diagnosis."""

    TABLES = (
        Table("prompts", PROMPT_KEY, "diag_prompts.csv.gz"),
        Table("layers", ("method", "mode", "site", "tokens", "layer"), "diag_layers.csv"),
        Table("table12", ("method", "mode", "site", "tokens", "ref"), "table12.csv"),
        Table("timing", ("method",), "timing.csv", ("seconds",)),
    )


def loaded_key(model: Model) -> str:
    """The folder name of a loaded model, as ``tlgeo compress`` names it (a directory's name, or
    the name with ``:`` as ``-``); a model whose directory is gone (e.g. :func:`tlgeo.models.tiny_model`'s
    temporary one) is named by a hash of its weights."""
    label = model_label(model)
    p = Path(label).expanduser()
    if p.is_dir():
        return p.name
    if label.startswith(("/", ".", "~")):
        from .compress import weights_fingerprint

        return "weights-" + weights_fingerprint(model)
    return label.replace(":", "-")


def default_root(model: Model) -> Path:
    """``$TLGEO_CACHE/compressed/<model>``: where ``tlgeo compress`` writes the compressed models; for
    weights loaded in another dtype than float32, ``<model>-<dtype>`` (their models are compressed from
    the rounded weights: in one folder each dtype's run would recompress the other's)."""
    from .llmc import compressed_dir

    dtype = str(getattr(model.cfg, "dtype", "float32")).removeprefix("torch.")
    key = loaded_key(model)
    return compressed_dir(key if dtype == "float32" else f"{key}-{dtype}", "x").parent


def units(model: Model, cfg: CompressionConfig) -> list[str]:
    """The compressed methods, in the config's order."""
    return list(cfg.methods)


def _compressed_dirs(
    model: Model, cfg: CompressionConfig, methods: list[str], say: Callable[[str], None]
) -> dict[str, Path]:
    root = Path(cfg.root) if cfg.root else default_root(model)
    if cfg.compress is not None:
        from .compress import ensure_compressed

        with folder_lock(root).acquire("tlgeo compression: compressing models", wait=True):  # one compressor
            ensure_compressed(model, methods, root, cfg.compress, log=say)  # at a time; the next finds them made
    dirs = {m: root / m for m in methods}
    missing = [str(p) for p in dirs.values() if not (p / "config.json").is_file()]
    if missing:
        raise FileNotFoundError(
            f"compressed model directory missing: {', '.join(missing)} (create them with tlgeo compress)"
        )
    return dirs


def _stored(
    store: Path | None, settings: dict, modes: tuple[str, ...], ids: dict[str, str], identity: dict
) -> tuple[pd.DataFrame, pd.DataFrame, set[str]]:
    """The per-prompt rows and timings in ``store`` of the dense model's ``identity`` (rows of other
    models or dtypes are left alone), and the methods among ``ids`` whose rows there are complete for
    ``modes`` and were computed on the model now in their folder."""
    if store is None or not (store / CompressionResult.table("prompts").filename).exists():
        return pd.DataFrame(), pd.DataFrame(), set()
    path = store / CompressionResult.table("prompts").filename
    old = of_identity(read_table(path), identity)
    if old.empty:
        return pd.DataFrame(), pd.DataFrame(), set()
    for col, want in settings.items():
        got = old[col].astype(str).unique().tolist() if col in old.columns else ["(not recorded)"]
        if got != [str(want)]:
            raise InputError(
                f"{path} was made with other settings ({col.removesuffix('_cfg')} {', '.join(got)}, not "
                f"{want}); use another --out or delete it"
            )
    timing_path = store / CompressionResult.table("timing").filename
    timing = of_identity(read_table(timing_path), identity) if timing_path.exists() else pd.DataFrame()
    done = set()
    for m, g in old[old["method"].isin(list(ids))].groupby("method"):
        g = g[g["mode"].isin(modes)]
        same_model = MODEL_COLUMN in g.columns and g[MODEL_COLUMN].astype(str).eq(ids[m]).all()
        if set(g["mode"]) >= set(modes) and same_model:
            done.add(m)
    return old, timing, done


@identified
def run(
    model: Model,
    cfg: CompressionConfig,
    *,
    out: str | os.PathLike | None = None,
    log: str | os.PathLike | None = None,
    units: Sequence[str] | None = None,
    progress: bool = False,
    say: Callable[[str], None] | None = None,
) -> CompressionResult:
    """Diagnose the compressed models of ``units`` (default: every method of ``cfg``) against the
    dense ``model``. With ``out`` the tables are merged into ``out`` (each method's per-prompt rows
    and timing as soon as it is done, the summaries at the end); ``log`` (default ``out``) is where
    a rerun resumes from. ``progress``: print each method's time (through ``say``, default print)."""
    from ..data import load_text
    from .compress import model_id
    from .counterfactual import diagnose, prompt_windows
    from .summary import summary_tables

    say = say or (lambda s: print(s, flush=True))
    chosen = list(cfg.methods) if units is None else list(units)
    unknown = [m for m in chosen if m not in cfg.methods]
    if unknown:
        raise InputError(f"units {unknown} are not methods of the config ({list(cfg.methods)})")
    methods = [m for m in cfg.methods if m in set(chosen)]
    if not methods:
        return CompressionResult()
    dirs = _compressed_dirs(model, cfg, methods, say)
    tokens = prompt_windows(model, load_text(cfg.corpus), cfg.prompts, cfg.seq_len)
    settings = dict(zip(SETTINGS, (cfg.prompts, cfg.seq_len, cfg.corpus, loaded_key(model))))
    ids = {m: model_id(d) for m, d in dirs.items()}
    store = Path(log) if log is not None else (Path(out) if out is not None else None)
    old, old_timing, done = _stored(store, settings, cfg.modes, ids, run_identity(model).row())

    new, timings = [], []
    t_all = time.perf_counter()
    for m in methods:
        if m in done:
            continue
        t0 = time.perf_counter()
        df = diagnose(model, {m: dirs[m]}, tokens, modes=cfg.modes, batch_size=cfg.batch_size)
        seconds = time.perf_counter() - t0
        df = df.assign(**settings, **{MODEL_COLUMN: ids[m]})
        trow = pd.DataFrame(
            [
                {
                    "method": m,
                    "seconds": seconds,
                    "modes": ",".join(cfg.modes),
                    "n_prompts": cfg.prompts,
                    "seq_len": cfg.seq_len,
                }
            ]
        )
        for folder in {p for p in (store, Path(out) if out is not None else None) if p is not None}:
            CompressionResult(prompts=df, timing=trow).deliver(folder, identity=run_identity(model).row())
        new.append(df)
        timings.append(trow)
        if progress:
            say(f"[{m}] diagnosis {seconds:.1f} s")
    if progress:
        say(f"diagnosis of {len(methods) - len(done)} method(s): {time.perf_counter() - t_all:.1f} s")

    kept = [old[old["method"].isin(list(done)) & old["mode"].isin(cfg.modes)]] if done else []
    prompts = pd.concat(kept + new, ignore_index=True)
    layers, table12 = summary_tables(prompts, methods)
    if done and len(old_timing):
        timings.insert(0, old_timing[old_timing["method"].isin(list(done))])
    timing = pd.concat(timings, ignore_index=True) if timings else None
    if timing is not None:
        timing = timing.sort_values(
            "method", key=lambda s: s.map({m: i for i, m in enumerate(methods)}), kind="stable"
        ).reset_index(drop=True)
    res = CompressionResult(
        prompts=prompts, layers=layers.reset_index(drop=True), table12=table12.reset_index(drop=True), timing=timing
    )
    return res.deliver(out, identity=run_identity(model).row())


# ---------------------------------------------------------------------------
# what a run costs (tlgeo plan): per method, its model loaded and the dense, local and e2e passes
# ---------------------------------------------------------------------------


def compress_work(shape, cfg: CompressConfig, method: str) -> dict[str, float]:
    """The host work of compressing ``method`` with ``cfg`` as amounts of the planner's calibrated kinds
    (tlgeo.planner.calibration): a fixed part per parameter (``compress.fixed``: load, quantise, save) and the
    method's own per parameter and calibration token (``compress.<kind>``, else its family's)."""
    spec = cfg.spec(method)
    return {
        "compress.fixed": shape.params,
        f"compress.{spec.kind}|compress.{spec.family}": shape.params * cfg.n_calib * cfg.calib_seq_len,
    }


def plan(shape, cfg: CompressionConfig) -> list:
    """Per method (the diagnosis runs method by method): its compressed model loaded beside the
    dense model (its device, dtype and sharding: one more copy of the weights), the dense model's forward per
    batch with its blocks' inputs, outputs and updates kept, each compressed block twice on the dense states (local:
    the whole block, then its MLP with the attention replayed; no unembedding) and the compressed
    model's own forward (e2e). With ``cfg.compress`` (Python only), every method compressed first
    (a folder already there is reused: an upper bound)."""
    from ..planner import GIB, Work

    methods, tokens, seq = len(cfg.methods), cfg.prompts * cfg.seq_len, cfg.seq_len
    batch = min(cfg.batch_size, cfg.prompts)
    live = batch * seq * shape.d_model * 4 * shape.n_layers  # one float32 [batch, seq, d] per block
    base = live * (5 if "local" in cfg.modes else 4)  # resid_pre, output, both updates (+ the raw attention output)
    comp = shape.params * 4  # the float32 files read
    out = []
    if cfg.compress is not None:
        host: dict[str, float] = {}
        for m in cfg.methods:
            for kind, amount in compress_work(shape, cfg.compress, m).items():
                host[kind] = host.get(kind, 0.0) + amount
        c = cfg.compress
        out.append(
            Work(
                "compress",
                0,
                1,
                host=host,
                note=f"{methods} method(s), llmcompressor on {c.n_calib} x {c.calib_seq_len} tokens, {c.device}",
            )
        )
    load = {"start.load.directory": methods, "start.load.directory.gib": methods * comp / GIB}  # as a command's
    out.append(
        Work(
            "load",
            0,
            1,
            host=load,
            weight_copies=1,
            note=f"{methods} compressed model(s), one at a time, beside the dense model",
        )
    )
    out.append(Work("dense", methods * tokens, seq, batch, kept_bytes=base, note="once per batch and method"))
    if "local" in cfg.modes:
        mlp = shape.mlp_params(shape.experts_per_token or None)
        out.append(
            Work(
                "local",
                methods * tokens,
                seq,
                batch,
                blocks=1 + mlp / (shape.attn_params + mlp),
                readout=0.0,
                logit_copies=0.0,
                kept_bytes=base,
                weight_copies=1,
                note="each compressed block on the dense states, twice",
            )
        )
    if "e2e" in cfg.modes:
        out.append(
            Work(
                "e2e",
                methods * tokens,
                seq,
                batch,
                kept_bytes=base + 4 * live,
                weight_copies=1,
                note="each compressed model on its own states",
            )
        )
    return out


def _tiny_compress() -> CompressConfig:
    return CompressConfig(methods=("wanda",), n_calib=4, calib_seq_len=32, pipeline="basic")


def support(family: Family) -> Support:
    """The compression diagnosis on ``family``: dense Llama-style decoder layers (``model.layers``, ``self_attn``,
    ``mlp``) only."""
    if not family.attention:
        return Support("no", f"the compression diagnosis prunes attention and MLP projections: {family.name} has none")
    if family.layer_path != "model.layers":
        return Support(
            "no",
            f"the compression diagnosis reads Llama-style decoder layers (model.layers, self_attn, "
            f"mlp); {family.name} keeps its blocks elsewhere",
        )
    if family.moe:
        return Support("no", "the compression diagnosis prunes dense MLPs; mixture-of-experts weights are not mapped")
    if family.compiled:
        return Support(
            "no",
            "the compression diagnosis reads Llama-style decoder layers (model.layers, self_attn, "
            "mlp with gate/up/down projections); a compiled program's MLP is fc_in/fc_out and its "
            "weights are compiled, not trained",
        )
    return Support("yes")


ANALYSIS = register_analysis(
    Analysis(
        "compression",
        CompressionConfig,
        run,
        CompressionResult,
        units,
        "compression diagnosis: perpendicular vs parallel error of compressed models, per block and site (Table 12)",
        tiny=dict(methods=("wanda", "wanda_2_4"), prompts=2, seq_len=16, compress=_tiny_compress()),
        plan=plan,
        support=support,
        docs="analyses/compression",
    )
)
