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

from ..families import Family, Support
from ..runner.analysis import Analysis, Result, Table, register_analysis
from ..models import model_label
from ..runner.identity import identified, run_identity
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
    perturbation) and ``damage_summary`` (per delta: each kind's mean and sd over seeds, their ratio,
    the paper's values), ``blimp`` (per perturbation and paradigm, with ``pooled``), ``repair``
    (per perturbation and repair), ``entropy`` (per perturbation), ``probes`` (per block,
    task and features)."""

    TABLES = (
        Table("damage", ("model", *_damage.KEY), "dirmag_damage.csv", _VOLATILE),
        Table(
            "damage_summary",
            ("model", *[k for k in _damage.KEY if k not in ("kind", "seed")]),
            "dirmag_damage_summary.csv",
            derive=lambda r: _damage.damage_summary(r.damage),
        ),
        Table("blimp", ("model", *_syntax.KEY, "paradigm"), "dirmag_blimp.csv", _VOLATILE),
        Table("repair", ("model", *_repair.KEY, "repair"), "dirmag_repair.csv", _VOLATILE),
        Table("entropy", ("model", *_entropy.KEY), "dirmag_entropy.csv", _VOLATILE),
        Table("probes", ("model", *PROBE_KEY), "dirmag_probes.csv", _VOLATILE),
    )


def sentences_of(cfg: DirmagConfig) -> list[str]:
    """The scored sentences: WikiText's (the notebook's) or the tails of ``cfg.sentence_corpus``."""
    if cfg.sentence_corpus:
        got = [
            t
            for c in cfg.sentence_corpus.split(",")
            if c
            for t in _damage.corpus_sentences(c, tail_frac=cfg.sentence_tail)
        ]
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


@identified
def run(
    model,
    cfg: DirmagConfig,
    *,
    out: str | Path | None = None,
    log: str | Path | None = None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: Any = None,
) -> DirmagResult:
    """Every part ``cfg`` asks for, on ``units`` (default all). With ``out`` each table is
    merged into ``out`` as soon as it is done; logs go to ``log`` (default ``out``).
    ``on_table(name, df)`` is called after each part (the CLI prints it)."""
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
        "damage": lambda: _damage.lm_damage(
            model, sents, grid, max_tokens=cfg.max_tokens, log_path=logs("damage"), **kw
        ),
        "blimp": lambda: _syntax.blimp_damage(
            model, _syntax.agreement_pairs(cfg.blimp_pairs), grid, log_path=logs("blimp"), **kw
        ),
        "repair": lambda: _repair.causal_repair(
            model, sents[: cfg.repair_sentences], small, repair_layers=cfg.repair_layers, log_path=logs("repair"), **kw
        ),
        "entropy": lambda: _entropy.attention_entropy(
            model, sents[: cfg.entropy_sentences], small, log_path=logs("entropy"), **kw
        ),
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
        DirmagResult(**{part: tables[part]}).deliver(out, on_table, identity=run_identity(model).row())
    return DirmagResult(**tables)


def _probes(model, cfg: DirmagConfig, chosen: list[tuple] | None, progress: bool) -> pd.DataFrame | None:
    from ..evals.treebank import load_treebank

    layers = probe_layers(model, cfg)
    if chosen is not None:
        layers = [l for l in layers if ("probe", l) in chosen]
    if not layers:
        return None
    return direction_magnitude_probes(
        model,
        load_treebank("dev", cfg.probe_sentences),
        load_treebank("test", cfg.probe_sentences),
        layers,
        batch_size=cfg.batch_size,
        progress=progress,
    )


# ---------------------------------------------------------------------------
# what a run costs (tlgeo plan): a clean pass per part, then perturbed passes resumed at the first perturbed block
# ---------------------------------------------------------------------------

# the sweeps' hooks ("dirmag.sweep", a share of a bare forward: they run below the cost model's FLOPs) and the
# probes' fits ("dirmag.probe_fit": scikit-learn on the host, per probed block, training sentence and d_model feature)
# are priced by the planner's calibration table (tlgeo.planner.calibration)


def _n_deltas(cfg: DirmagConfig) -> int:
    from .engine import RELATIVE_DELTAS

    if cfg.deltas is not None:
        return len(set(cfg.deltas))
    if cfg.relative:
        return len(RELATIVE_DELTAS)
    return len(set(cfg.absolute_deltas)) + len([f for f in cfg.norm_fractions if f > 0])  # x the clean median norm


def _sweep_work(
    shape,
    name: str,
    texts: Sequence[str],
    max_tokens: int | None,
    batch: int,
    perturbations: int,
    passes: int,
    first: int,
    *,
    kept_per_token: float = 0.0,
    eager: bool = False,
):
    """A clean pass of ``texts`` and ``perturbations`` x ``passes`` passes resumed at block ``first``."""
    from ..planner import Work, padded_batches, text_tokens

    tokens, longest = padded_batches([text_tokens(t, max_tokens) for t in texts], batch)
    resumed = perturbations * passes
    blocks = (1 + resumed * (shape.n_layers - first) / shape.n_layers) / (1 + resumed)
    kept = tokens * shape.d_model * 4 * (1 + kept_per_token)  # the residual where they resume, per batch
    return Work(
        name,
        tokens * (1 + resumed),
        longest,
        batch,
        hooks={"dirmag.sweep": 1},
        blocks=blocks,
        eager=eager,
        kept_bytes=kept,
        note=f"{len(texts)} sentences: 1 clean + {resumed} passes resumed at block {first}",
    )


def _probes_plan(shape, cfg: DirmagConfig) -> list:
    """The probes' forwards over the train and test treebank sentences, and their fits (host work)."""
    from ..evals.treebank import load_treebank
    from ..hooks.adapter import resolve_layers
    from ..planner import Work, padded_batches, text_tokens

    blocks = resolve_layers(
        shape,
        cfg.probe_layers
        if cfg.probe_layers is not None
        else default_probe_layers(shape.n_layers, cfg.probe_layer_count),
    )
    train, test = load_treebank("dev", cfg.probe_sentences), load_treebank("test", cfg.probe_sentences)
    split = [padded_batches([text_tokens(s.text, 128) for s in ss], cfg.batch_size) for ss in (train, test)]
    words = sum(len(s.upos) for s in [*train, *test])
    return [
        Work(
            "probes: states",
            split[0][0] + split[1][0],
            max(split[0][1], split[1][1]),
            cfg.batch_size,
            host_bytes=words * len(blocks) * shape.d_model * 4,
            note=f"{len(train)} + {len(test)} UD sentences, {words} words at {len(blocks)} block(s)",
        ),
        Work(
            "probes: fits",
            0,
            1,
            host={"dirmag.probe_fit": len(blocks) * len(train) * shape.d_model},
            note="POS and depth probes on the direction, the norm, both (host)",
        ),
    ]


def plan(shape, cfg: DirmagConfig) -> list:
    """Per part: one clean pass of its sentences and, per perturbation (kind x delta x seed), passes
    resumed at the first perturbed block (``(n - l) / n`` of the blocks): one for the damage, BLiMP
    and entropy, three for the repair (unrepaired, attention, norms); the probes' forwards and their
    fits (host work). Sentence lengths from their characters."""
    from ..hooks.adapter import resolve_layers
    from .repair import REPAIRS
    from .syntax import agreement_pairs

    first = min(cfg.grid().chosen_layers(shape))  # out-of-range layers fail here, as in the run
    sweep_batch = 1 if cfg.mode == "faithful" else cfg.batch_size
    perts = len(cfg.kinds) * _n_deltas(cfg) * cfg.seeds
    small = len(cfg.kinds) * len(set(cfg.repair_deltas)) * cfg.seeds
    parts = cfg.parts()
    sents = sentences_of(cfg)
    out = [_sweep_work(shape, "damage", sents, cfg.max_tokens, sweep_batch, perts, 1, first)]
    if "blimp" in parts:
        pairs = agreement_pairs(cfg.blimp_pairs)
        out.append(
            _sweep_work(
                shape, "BLiMP", [p.good for p in pairs] + [p.bad for p in pairs], None, sweep_batch, perts, 1, first
            )
        )
    if "repair" in parts:
        layers = resolve_layers(
            shape, cfg.repair_layers if cfg.repair_layers is not None else cfg.grid().chosen_layers(shape)
        )
        hooks = sum(len(h) for h in REPAIRS.values()) * len(layers)  # the clean tensors the repairs put back
        out.append(
            _sweep_work(
                shape,
                "repair",
                sents[: cfg.repair_sentences],
                cfg.max_tokens,
                sweep_batch,
                small,
                1 + len(REPAIRS),
                first,
                kept_per_token=hooks,
            )
        )
    if "entropy" in parts:
        out.append(
            _sweep_work(
                shape,
                "entropy",
                sents[: cfg.entropy_sentences],
                cfg.max_tokens,
                sweep_batch,
                small,
                1,
                first,
                eager=True,
            )
        )
    if "probes" in parts:
        out += _probes_plan(shape, cfg)
    return out


def support(family: Family) -> Support:
    """Direction vs magnitude on ``family``: residual states and the unembedding, on every family."""
    if family.post_ln:
        return Support("differs", "post-LN: the perturbed resid_post is the renormalised state")
    return Support("yes")


ANALYSIS = register_analysis(
    Analysis(
        "dirmag",
        DirmagConfig,
        run,
        DirmagResult,
        units,
        "direction vs magnitude: L2-matched perturbations, syntax, repair, entropy, probes (seed paper 003)",
        tiny=dict(
            sentences=3,
            seeds=2,
            absolute_deltas=(1.0,),
            norm_fractions=(),
            blimp_pairs=1,
            probe_sentences=4,
            probe_layer_count=2,
            batch_size=4,
        ),
        plan=plan,
        support=support,
        docs="analyses/dirmag",
    )
)
