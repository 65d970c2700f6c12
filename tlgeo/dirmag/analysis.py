"""The direction-vs-magnitude analysis of one model, on the analysis contract:
``run(model, DirmagConfig(...)) -> DirmagResult``.

Work units: each perturbation ``(kind, seed)`` (every delta of the grid, every part that
perturbs) and each probed block; a run over some units followed by
:meth:`DirmagResult.merge` equals a run over all of them. Every part writes its finished
perturbations to a JSON-lines log (``<log>/dirmag_<part>.jsonl``) and its table into
``out`` as soon as it is done, so an interrupted run resumes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from ..families import check_support
from ..analysis import Analysis, Result, Table, register_analysis
from ..models import model_label
from . import damage as _damage
from . import entropy as _entropy
from . import repair as _repair
from . import syntax as _syntax
from .config import DirmagConfig
from .probes import KEY as PROBE_KEY
from .probes import default_probe_layers, direction_magnitude_probes

__all__ = ["DirmagResult", "run", "units", "sentences_of", "probe_layers"]

_VOLATILE = ("wall_s",)


@dataclass
class DirmagResult(Result):
    """One table per part (``None`` where the config skipped it): ``damage`` (one row per
    perturbation), ``blimp`` (per perturbation and paradigm, with ``pooled``), ``repair``
    (per perturbation and repair), ``entropy`` (per perturbation), ``probes`` (per block,
    task and features)."""

    TABLES = (
        Table("damage", ("model", *_damage.KEY), "dirmag_damage.csv", _VOLATILE),
        Table("blimp", ("model", *_syntax.KEY, "paradigm"), "dirmag_blimp.csv", _VOLATILE),
        Table("repair", ("model", *_repair.KEY, "repair"), "dirmag_repair.csv", _VOLATILE),
        Table("entropy", ("model", *_entropy.KEY), "dirmag_entropy.csv", _VOLATILE),
        Table("probes", ("model", *PROBE_KEY), "dirmag_probes.csv", _VOLATILE),
    )


def sentences_of(cfg: DirmagConfig) -> list[str]:
    """The scored sentences: WikiText's (the notebook's) or the tails of ``cfg.sentence_corpus``."""
    if cfg.sentence_corpus:
        got = [t for c in cfg.sentence_corpus.split(",") if c
               for t in _damage.corpus_sentences(c, tail_frac=cfg.sentence_tail)]
        return got[: cfg.sentences or None]
    return _damage.wikitext_sentences(cfg.sentences or None)


def probe_layers(model, cfg: DirmagConfig) -> list[int]:
    if cfg.probe_layers is not None:
        return list(cfg.probe_layers)
    return default_probe_layers(model.cfg.n_layers, cfg.probe_layer_count)


def units(model, cfg: DirmagConfig) -> list[tuple]:
    """``("perturbation", kind, seed)`` for every kind and seed, then ``("probe", block)`` for
    every probed block (when probes are asked for)."""
    out: list[tuple] = [("perturbation", k, 42 + i) for k in cfg.kinds for i in range(cfg.seeds)]
    if "probes" in cfg.parts():
        out += [("probe", l) for l in probe_layers(model, cfg)]
    return out


def run(model, cfg: DirmagConfig, *, out: str | Path | None = None, log: str | Path | None = None,
        units: Sequence[tuple] | None = None, progress: bool = False,
        on_table: Any = None) -> DirmagResult:
    """Every part ``cfg`` asks for, on ``units`` (default all). With ``out`` each table is
    merged into ``out`` as soon as it is done; logs go to ``log`` (default ``out``).
    ``on_table(name, df)`` is called after each part (the CLI prints it)."""
    check_support(model, "dirmag")  # a family it means nothing on fails here, before any work
    chosen = None if units is None else [tuple(u) for u in units]
    perts = None if chosen is None else tuple((u[1], u[2]) for u in chosen if u[0] == "perturbation")
    log_dir = Path(log) if log is not None else (Path(out) if out is not None else None)
    logs = (lambda name: log_dir / f"dirmag_{name}.jsonl") if log_dir is not None else (lambda name: None)
    label = model_label(model)
    grid = cfg.grid(only=perts)
    small = replace(grid, deltas=cfg.repair_deltas)
    kw = dict(batch_size=cfg.batch_size, progress=progress)
    sents = sentences_of(cfg)
    runs = {
        "damage": lambda: _damage.lm_damage(model, sents, grid, max_tokens=cfg.max_tokens, log_path=logs("damage"),
                                           **kw),
        "blimp": lambda: _syntax.blimp_damage(model, _syntax.agreement_pairs(cfg.blimp_pairs), grid,
                                             log_path=logs("blimp"), **kw),
        "repair": lambda: _repair.causal_repair(model, sents[: cfg.repair_sentences], small,
                                               repair_layers=cfg.repair_layers, log_path=logs("repair"), **kw),
        "entropy": lambda: _entropy.attention_entropy(model, sents[: cfg.entropy_sentences], small,
                                                     log_path=logs("entropy"), **kw),
        "probes": lambda: _probes(model, cfg, chosen, progress),
    }
    tables: dict[str, pd.DataFrame] = {}
    for part in cfg.parts():
        if part != "probes" and perts == ():
            continue
        df = runs[part]()
        if df is None:
            continue
        tables[part] = df.assign(model=label)
        if out is not None:
            DirmagResult(**{part: tables[part]}).save(out)
        if on_table is not None:
            on_table(part, tables[part])
    return DirmagResult(**tables)


def _probes(model, cfg: DirmagConfig, chosen: list[tuple] | None, progress: bool) -> pd.DataFrame | None:
    from ..evals.treebank import load_treebank

    layers = probe_layers(model, cfg)
    if chosen is not None:
        layers = [l for l in layers if ("probe", l) in chosen]
    if not layers:
        return None
    return direction_magnitude_probes(model, load_treebank("dev", cfg.probe_sentences),
                                      load_treebank("test", cfg.probe_sentences), layers,
                                      batch_size=cfg.batch_size, progress=progress)


ANALYSIS = register_analysis(Analysis(
    "dirmag", DirmagConfig, run, DirmagResult, units,
    "direction vs magnitude: L2-matched perturbations, syntax, repair, entropy, probes (seed paper 003)",
    tiny=dict(sentences=3, seeds=2, absolute_deltas=(1.0,), norm_fractions=(), blimp_pairs=1, probe_sentences=4,
              probe_layer_count=2, batch_size=4)))
