"""The PDSF analysis of one model, on the analysis contract: ``run(model, PDSFConfig(...)) ->
PDSFResult``: the geometry of a prompt set at every layer, single-pass edits at the last prompt
token, and persistent rotations during generation; each table records how the prompts were
encoded.

Work units (:func:`units`): ``("geometry",)`` (one unit: D and S are fitted across the
prompts), ``("single_pass", condition)`` per single-pass condition and ``("generation",
condition)`` per rotated subspace. Every random draw is seeded by ``seed``, the prompt and the
repeat, never by the other conditions of the call, so a run over some units followed by
:meth:`PDSFResult.merge` equals a run over all of them. The unedited continuations, and the
static/dynamic split of F along them (the ``dynamics`` tables), are what every generation
condition starts from: each generation unit brings them (the same rows; merging keeps one copy).
With ``out`` each stage's tables are merged into ``out`` as soon as it is done; every stage
logs what it finished to a JSON-lines log in ``log`` (default ``out``): ``pdsf_geometry.jsonl``,
``pdsf_single_pass.jsonl`` (per condition) and ``pdsf_generation.jsonl`` (per condition), so
an interrupted run resumes.

* :func:`pdsf_states`: encode a prompt set, collect its last-token states and prediction
  directions (one forward per batch);
* :func:`run_geometry`: :func:`tlgeo.pdsf.layer_stats.pdsf_geometry` on them, resumable;
* :func:`run_single_pass`: :func:`tlgeo.pdsf.single_pass.single_pass` (one forward per edit),
  resumable condition by condition;
* :func:`run_generation`: :func:`tlgeo.pdsf.interventions.persistent_rotations`, one condition
  at a time, each finished condition (and the unedited continuations, and the static/dynamic
  split of F along them, :func:`tlgeo.pdsf.dynamics.f_dynamics`) a line of the resume log.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Sequence

import pandas as pd
import torch
from jaxtyping import Float, Int
from torch import Tensor

from ..errors import InputError
from ..families import Family, Support
from ..runner.analysis import Analysis, Result, Table, register_analysis
from ..hooks.resume import unembedding
from ..models import Model, model_label
from ..runner.identity import identified, run_identity
from ..runner.results import ResultLog, content_digest
from .config import PDSFConfig
from .dynamics import f_dynamics
from .layer_stats import PDSFGeometry, pdsf_geometry
from .interventions import (
    CONDITIONS,
    default_layer,
    divergence_summary,
    frame_shift_base_rate,
    frame_shifts,
    persistent_rotations,
)
from .generation import KL_CACHE_BYTES
from .single_pass import DEFAULT_SINGLE_PASS, batch_order, single_pass, single_pass_layer, single_pass_summary
from .prompts import Encoding, PromptSet, encode_prompts
from .states import PromptStates, directions, final_norm_scale, last_token_states, logit_lens


__all__ = [
    "PDSFStates",
    "pdsf_states",
    "run_geometry",
    "run_single_pass",
    "SinglePassResult",
    "run_generation",
    "GenerationResult",
    "PDSFResult",
    "units",
    "unit_cost",
    "run",
    "stage_states",
    "LOGS",
]

LOGS = {
    "geometry": "pdsf_geometry.jsonl",
    "single_pass": "pdsf_single_pass.jsonl",
    "generation": "pdsf_generation.jsonl",
}  # the resume log of each stage, in ``log``


@dataclass
class PDSFStates:
    prompts: PromptSet
    tokens: list[Int[Tensor, "pos"]]
    encoding: Encoding
    states: PromptStates
    u: Float[Tensor, "n d"]
    fold_norm: bool

    def settings(self) -> dict:
        return {
            "prompt_set": self.prompts.name,
            "n_prompts": len(self.prompts),
            **self.encoding.as_dict(),
            "fold_norm": self.fold_norm,
        }

    def subset(self, prompts: PromptSet) -> "PDSFStates | None":
        """The states of ``prompts`` where they are all among these (same set, by id); else None."""
        where = {i: k for k, i in enumerate(self.prompts.ids)}
        if prompts.name != self.prompts.name or any(i not in where for i in prompts.ids):
            return None
        index = [where[i] for i in prompts.ids]
        return PDSFStates(
            prompts,
            [self.tokens[k] for k in index],
            self.encoding,
            self.states.select(index),
            self.u[index],
            self.fold_norm,
        )


def pdsf_states(
    model: Model,
    prompts: PromptSet,
    *,
    template: str = "raw",
    bos: bool | None = None,
    fold_norm: bool = False,
    batch_size: int = 16,
) -> PDSFStates:
    """Encode ``prompts``, collect their last-token states, and the prediction direction of each
    prompt's final argmax token (raw unembedding, or with the final norm's scale folded in)."""
    if not len(prompts):
        raise InputError("an empty prompt set")
    tokens, enc = encode_prompts(model, prompts.texts, template=template, bos=bos)
    ps = last_token_states(model, tokens, batch_size=batch_size, lens=False)  # run_geometry's lens mode computes it
    return PDSFStates(prompts, tokens, enc, ps, directions(model, ps.predicted, fold_norm=fold_norm), fold_norm)


def _frame(records: list[dict]) -> pd.DataFrame:
    return pd.DataFrame.from_records(records)


def run_geometry(
    model: Model,
    st: PDSFStates,
    *,
    mode: str = "exact",
    k_D: int | None = None,
    k_S: int | None = None,
    layers: Sequence[int] | None = None,
    complexity: bool = True,
    seed: int = 0,
    prediction: str = "final",
    log_path: str | os.PathLike | None = None,
    progress: bool = False,
) -> PDSFGeometry:
    """The geometry tables, each row carrying the encoding settings and the model's width.
    ``prediction``: ``final`` (the model's argmax, the authors') or ``lens`` (each state's own
    logit-lens argmax through the final norm and the unembedding). With ``log_path`` the tables
    are a line of that JSON-lines log, read back by a rerun with the same settings."""
    if prediction not in ("final", "lens"):
        raise InputError(f"prediction must be 'final' or 'lens', got {prediction!r}")
    meta = {**st.settings(), "mode": mode, "prediction": prediction, "d_model": model.cfg.d_model}
    key = {
        "stage": "geometry",
        "model": model_label(model),
        **meta,
        "k_D": k_D,
        "k_S": k_S,
        "layers": None if layers is None else [int(l) for l in layers],
        "complexity": complexity,
        "seed": seed,
        "inputs": content_digest(st.tokens),
    }  # the prompts' token ids: another prompt set is computed again
    log = (
        ResultLog(log_path, key=tuple(key), identity=run_identity(model).row(), content=("inputs",))
        if log_path
        else None
    )
    row = log.get(**key) if log else None
    if row is not None:
        if progress:
            print(f"geometry: read back from {log_path}")
    else:
        if prediction == "lens" and st.states.lens is None:
            st.states.lens = logit_lens(model, st.states.states)
        u = (
            st.u
            if prediction == "final"
            else torch.stack([directions(model, t, fold_norm=st.fold_norm) for t in st.states.lens])
        )
        g = pdsf_geometry(
            st.states,
            u,
            st.prompts.groups,
            w_u=unembedding(model),
            norm_scale=final_norm_scale(model),
            layers=layers,
            k_D=k_D,
            k_S=k_S,
            mode=mode,
            complexity=complexity,
            seed=seed,
        )
        # the tables as records (a JSON line), read back the same way whether fresh or resumed
        row = {
            **key,
            "tables": {
                "layers": g.layers.assign(**meta).to_dict("records"),
                "parts": g.parts.assign(**meta).to_dict("records"),
            },
        }
        if log:
            log.add(row)
    return PDSFGeometry(_frame(row["tables"]["layers"]), _frame(row["tables"]["parts"]))


@dataclass
class SinglePassResult:
    """``rows``: one per condition, prompt and repeat; ``angles``: the mean angle per condition and
    later state; ``summary``: one row per condition."""

    rows: pd.DataFrame
    angles: pd.DataFrame
    summary: pd.DataFrame


def run_single_pass(
    model: Model,
    st: PDSFStates,
    *,
    conditions: Sequence[str] = DEFAULT_SINGLE_PASS,
    mode: str = "exact",
    layer: int | None = None,
    alpha: float = 0.5,
    repeats: int = 3,
    rotation: str = "haar",
    seed: int = 42,
    batch_size: int = 16,
    log_path: str | os.PathLike | None = None,
    progress: bool = False,
) -> SinglePassResult:
    """Single-pass edits at state ``layer`` (default the authors' ``max(1, int(0.15 L))``) of the
    prompts' last token, every table carrying the settings. With ``log_path`` each finished
    condition is a line of that JSON-lines log, and a rerun with the same settings runs only the
    conditions it lacks."""
    layer = single_pass_layer(model.cfg.n_layers) if layer is None else layer
    if not 1 <= layer <= model.cfg.n_layers:
        raise InputError(f"layer {layer} out of range: states 1..{model.cfg.n_layers} can be edited")
    conditions = list(conditions)
    meta = {
        **st.settings(),
        "mode": mode,
        "layer": layer,
        "alpha": alpha,
        "repeats": repeats,
        "rotation": rotation,
        "seed": seed,
    }
    key = {"model": model_label(model), **meta, "inputs": content_digest(st.tokens)}
    log = (
        ResultLog(log_path, key=("condition", *key), identity=run_identity(model).row(), content=("inputs",))
        if log_path
        else None
    )
    done = {c: row for c in conditions if log and (row := log.get(condition=c, **key)) is not None}
    todo = [c for c in conditions if c not in done]
    if progress and done:
        print(
            f"single pass: {', '.join(done)} read back from {log_path}"
            + (f"; running {', '.join(todo)}" if todo else "")
        )

    def finished(c: str, rows: pd.DataFrame, angles: pd.DataFrame) -> None:
        # as records (a JSON line), read back the same way whether fresh or resumed
        done[c] = {"condition": c, **key, "rows": rows.to_dict("records"), "angles": angles.to_dict("records")}
        if log:
            log.add(done[c])

    if todo:
        single_pass(
            model,
            st.tokens,
            st.prompts.groups,
            st.states.states[layer],
            st.u,
            layer=layer,
            conditions=todo,
            mode=mode,
            alpha=alpha,
            repeats=repeats,
            seed=seed,
            rotation_kind=rotation,
            batch_size=batch_size,
            on_condition=finished,
        )
    rows = batch_order(
        pd.concat([_frame(done[c]["rows"]) for c in conditions], ignore_index=True), conditions, batch_size
    )
    angles = pd.concat([_frame(done[c]["angles"]) for c in conditions], ignore_index=True)
    return SinglePassResult(
        rows.assign(**{k: v for k, v in meta.items() if k != "layer"}),
        angles.assign(**meta),
        single_pass_summary(rows).assign(**meta),
    )


@dataclass
class GenerationResult:
    """``rows``: one per condition and prompt; ``summary``: one per condition; ``dynamics``: the
    static/dynamic split of F along the unedited continuations, per layer, and ``steps``:
    ``cos(F_t, F_0)`` per step."""

    rows: pd.DataFrame
    summary: pd.DataFrame
    dynamics: pd.DataFrame
    steps: pd.DataFrame


def _base_continuations(
    model: Model, st: PDSFStates, log: ResultLog | None, logged: dict, max_new_tokens: int, batch_size: int
) -> Tensor:
    """The unedited greedy continuations of the prompts, read back from ``log`` or generated (and logged)."""
    key = {"stage": "base", "condition": "none", **logged}
    row = log.get(**key) if log else None
    base = torch.tensor(row["tokens"]) if row else None
    if base is None:
        from .generation import greedy_continuations

        base = greedy_continuations(model, st.tokens, max_new_tokens, batch_size=batch_size)
        if log:
            log.add({**key, "tokens": base.tolist()})
    return base


def _dynamics_row(
    model: Model,
    st: PDSFStates,
    base: Tensor,
    log: ResultLog | None,
    logged: dict,
    conditions: Sequence[str],
    *,
    mode: str,
    layer: int,
    batch_size: int,
) -> tuple[dict, Tensor | None]:
    """``(the static/dynamic split of F as a log row, F_dynamic's basis at layer)``: the split is read back
    from ``log`` or computed (and logged); the basis is computed only where ``F_dynamic`` is asked for."""
    dkey = {"stage": "dynamics", "condition": "none", **logged}
    drow = log.get(**dkey) if log else None
    basis = None
    if drow is None or "F_dynamic" in conditions:
        dyn = f_dynamics(
            model, st.tokens, base, st.states.states, st.u, mode=mode, basis_layer=layer, batch_size=batch_size
        )
        basis = dyn.basis
        if drow is None:
            drow = {**dkey, "layers": dyn.layers.to_dict("records"), "steps": dyn.steps.to_dict("records")}
            if log:
                log.add(drow)
    return drow, basis


def _rotated_rows(
    model: Model,
    st: PDSFStates,
    h: Tensor,
    todo: list[str],
    log: ResultLog | None,
    logged: dict,
    base: Tensor,
    basis: Tensor | None,
    progress: bool,
    **rotation_kw,
) -> dict[str, dict]:
    """Per condition of ``todo``, its log row (rows and continuations): every condition in one generation per
    batch, then the KL and a log line condition by condition (``rotation_kw``: :func:`persistent_rotations`')."""
    df, gens = persistent_rotations(
        model,
        st.tokens,
        st.prompts.groups,
        h,
        st.u,
        conditions=todo,
        baseline=base,
        f_dynamic=basis if "F_dynamic" in todo else None,
        progress=progress,
        **rotation_kw,
    )
    done = {}
    for c in todo:
        done[c] = {
            "stage": "generation",
            "condition": c,
            **logged,
            "rows": df[df["condition"] == c].to_dict("records"),
            "tokens": gens[c].tolist(),
        }
        if log:
            log.add(done[c])
    return done


def _generation_result(
    model: Model,
    st: PDSFStates,
    done: dict[str, dict],
    conditions: Sequence[str],
    base: Tensor,
    settings: dict,
    drow: dict,
) -> GenerationResult:
    """The tables of the logged rows of ``conditions``, with the frame-shift proxy from the stored continuations."""
    base_text = [model.tokenizer.decode(t) for t in base]
    frames = []
    for c in conditions:
        rows = pd.DataFrame(done[c]["rows"])
        # the frame-shift proxy from the stored continuations (so logs of earlier definitions agree)
        rows["frame_shift"] = frame_shifts(
            base_text, [model.tokenizer.decode(t) for t in done[c]["tokens"]], st.prompts.groups
        )[rows["prompt"].to_numpy()]
        frames.append(rows)
    df = pd.concat(frames, ignore_index=True).assign(**{k: v for k, v in settings.items() if k != "layer"})
    meta = {k: v for k, v in settings.items() if k not in ("layer", "mode")}
    base_rate = frame_shift_base_rate(base_text, st.prompts.groups)
    summary = divergence_summary(df).assign(**settings, frame_shift_base_pct=100 * base_rate)
    return GenerationResult(
        df, summary, pd.DataFrame(drow["layers"]).assign(**meta), pd.DataFrame(drow["steps"]).assign(**meta)
    )


def run_generation(
    model: Model,
    st: PDSFStates,
    *,
    conditions: Sequence[str] = CONDITIONS,
    mode: str = "exact",
    layer: int | None = None,
    max_new_tokens: int = 64,
    rotation: str = "haar",
    seed: int = 42,
    batch_size: int = 16,
    log_path: str | os.PathLike | None = None,
    progress: bool = False,
) -> GenerationResult:
    """Persistent rotations at state ``layer`` (default ``int(0.7 L)``), resumable condition by
    condition, and the static/dynamic split of F along the unedited continuations (which gives
    the ``F_dynamic`` condition its basis at ``layer``)."""
    layer = default_layer(model.cfg.n_layers) if layer is None else layer
    h = st.states.states[layer]
    settings = {
        **st.settings(),
        "mode": mode,
        "layer": layer,
        "max_new_tokens": max_new_tokens,
        "rotation": rotation,
        "seed": seed,
    }
    logged = {**settings, "inputs": content_digest(st.tokens)}  # the log's key: the settings and the prompts
    log = (
        ResultLog(
            log_path, key=("stage", "condition", *logged), identity=run_identity(model).row(), content=("inputs",)
        )
        if log_path
        else None
    )
    base = _base_continuations(model, st, log, logged, max_new_tokens, batch_size)
    drow, basis = _dynamics_row(model, st, base, log, logged, conditions, mode=mode, layer=layer, batch_size=batch_size)
    done = {c: log.get(stage="generation", condition=c, **logged) if log else None for c in conditions}
    if progress and any(done.values()):
        print(f"persistent rotations: {', '.join(c for c in conditions if done[c])} read back from {log_path}")
    todo = [c for c in conditions if done[c] is None]
    if todo:
        rotation_kw = dict(
            layer=layer,
            mode=mode,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            seed=seed,
            rotation_kind=rotation,
        )
        done.update(_rotated_rows(model, st, h, todo, log, logged, base, basis, progress, **rotation_kw))
    return _generation_result(model, st, done, conditions, base, settings, drow)


# ---------------------------------------------------------------------------
# the analysis contract: PDSFConfig -> run -> PDSFResult
# ---------------------------------------------------------------------------

_ENC = ("model", "prompt_set", "n_prompts", "template", "bos", "fold_norm", "mode")
_GEO = (*_ENC, "prediction", "layer")
_SP = (*_ENC, "layer", "alpha", "repeats", "rotation", "seed", "condition")
_GEN = (*_ENC, "rotation", "seed", "max_new_tokens", "layer", "condition")
_DYN = (*_ENC, "anchor", "max_new_tokens", "layer")


@dataclass
class PDSFResult(Result):
    """The tables of ``tlgeo pdsf`` (``None`` for a stage not run), each row with its model and
    settings: ``layers`` (one per state) and ``parts`` (per state and part) of the geometry;
    ``single_pass`` (per condition, prompt and repeat), ``single_pass_angles`` (per condition and
    later state), ``single_pass_summary`` (per condition); ``generation`` (per condition and
    prompt), ``generation_summary`` (per condition), ``dynamics`` (F along the unedited
    continuations, per layer) and ``dynamics_steps`` (per layer and step)."""

    TABLES = (
        Table("layers", _GEO, "pdsf_layers.csv"),
        Table("parts", (*_GEO, "part"), "pdsf_parts.csv"),
        Table("single_pass", (*_SP, "prompt", "repeat"), "pdsf_single_pass.csv.gz"),
        Table("single_pass_angles", (*_SP, "state"), "pdsf_single_pass_angles.csv"),
        Table("single_pass_summary", _SP, "pdsf_single_pass_summary.csv"),
        Table("generation", (*_GEN, "prompt"), "pdsf_generation.csv.gz"),
        Table("generation_summary", _GEN, "pdsf_generation_summary.csv"),
        Table("dynamics", _DYN, "pdsf_dynamics.csv"),
        Table("dynamics_steps", (*_DYN, "step"), "pdsf_dynamics_steps.csv"),
    )
    STAGE_TABLES: ClassVar[dict[str, tuple[str, ...]]] = {
        "geometry": ("layers", "parts"),
        "single_pass": ("single_pass", "single_pass_angles", "single_pass_summary"),
        "generation": ("generation", "generation_summary", "dynamics", "dynamics_steps"),
    }


def units(model: Model, cfg: PDSFConfig) -> list[tuple]:
    """``("geometry",)``, then ``("single_pass", condition)`` and ``("generation", condition)`` for
    every condition of the stages ``cfg`` runs."""
    out: list[tuple] = [("geometry",)] if cfg.stage_runs("geometry") else []
    out += [("single_pass", c) for c in cfg.single_pass_conditions()]
    out += [("generation", c) for c in cfg.generation_conditions()]
    return out


def stage_states(model: Model, cfg: PDSFConfig, stage: str, geometry: PDSFStates | None = None) -> PDSFStates:
    """The encoded prompts and states a stage runs on (the single pass reuses ``geometry``'s
    where it runs on the same prompts; a subset of them is computed afresh, so that its numbers do
    not depend on which other prompts shared its batches: a data-parallel run's ranks may not have
    the geometry)."""
    if stage == "single_pass" and geometry is not None and cfg.single_pass_shares_geometry_prompts():
        return geometry
    prompts = {
        "geometry": cfg.geometry_prompts,
        "single_pass": cfg.single_pass_prompts,
        "generation": cfg.generation_prompts,
    }[stage]()
    return pdsf_states(model, prompts, **cfg.encoding())


def _chosen_units(model: Model, cfg: PDSFConfig, units: Sequence[tuple] | None) -> list[tuple]:
    """``units`` as tuples (default: every unit of ``cfg``); a unit ``cfg`` does not have raises."""
    every = _units(model, cfg)
    chosen = every if units is None else [tuple(u) for u in units]
    unknown = [u for u in chosen if u not in every]
    if unknown:
        raise InputError(f"unknown unit(s) {unknown}; this config has {every}")
    return chosen


def _geometry_stage(
    model: Model, cfg: PDSFConfig, label: str, log_path: Path | None, progress: bool
) -> tuple[PDSFStates, dict[str, pd.DataFrame]]:
    """The geometry prompts' states and the geometry's tables, each row with its model."""
    geo_st = stage_states(model, cfg, "geometry")
    if progress:
        print(
            f"{len(geo_st.prompts)} {cfg.prompts} prompts ({geo_st.encoding.template}, BOS "
            f"{'on' if geo_st.encoding.bos else 'off'}); geometry at {geo_st.states.n_layers + 1} states"
        )
    g = run_geometry(model, geo_st, **cfg.geometry_args(), log_path=log_path, progress=progress)
    return geo_st, {"layers": g.layers.assign(model=label), "parts": g.parts.assign(model=label)}


def _single_pass_stage(
    model: Model,
    cfg: PDSFConfig,
    label: str,
    single: list[str],
    geo_st: PDSFStates | None,
    log_path: Path | None,
    progress: bool,
) -> dict[str, pd.DataFrame]:
    """The single-pass tables of conditions ``single``, each row with its model (and edited layer)."""
    st = stage_states(model, cfg, "single_pass", geo_st)
    if progress:
        print(f"single-pass edits on {len(st.prompts)} {cfg.prompts} prompts: {', '.join(single)}")
    sp = run_single_pass(model, st, conditions=single, **cfg.single_pass_args(), log_path=log_path, progress=progress)
    layer = sp.summary["layer"].iloc[0]
    return {
        "single_pass": sp.rows.assign(model=label, layer=layer),
        "single_pass_angles": sp.angles.assign(model=label),
        "single_pass_summary": sp.summary.assign(model=label),
    }


def _generation_stage(
    model: Model, cfg: PDSFConfig, label: str, gen: list[str], log_path: Path | None, progress: bool
) -> dict[str, pd.DataFrame]:
    """The generation and dynamics tables of conditions ``gen``, each row with its model (and edited layer)."""
    gst = stage_states(model, cfg, "generation")
    if progress:
        print(
            f"persistent rotations on {len(gst.prompts)} {cfg.generate} prompts, {cfg.new_tokens} tokens: "
            f"{', '.join(gen)}"
        )
    res = run_generation(model, gst, conditions=gen, **cfg.generation_args(), log_path=log_path, progress=progress)
    layer = res.summary["layer"].iloc[0]
    return {
        "generation": res.rows.drop(columns=["kl_steps"], errors="ignore").assign(model=label, layer=layer),
        "generation_summary": res.summary.assign(model=label),
        "dynamics": res.dynamics.assign(model=label),
        "dynamics_steps": res.steps.assign(model=label),
    }


@identified
def run(
    model: Model,
    cfg: PDSFConfig,
    *,
    out: str | os.PathLike | None = None,
    log: str | os.PathLike | None = None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: Callable[[str, pd.DataFrame], None] | None = None,
) -> PDSFResult:
    """Every stage ``cfg`` asks for, on ``units`` (default all): the geometry, the single-pass
    edits, the persistent rotations (with the static/dynamic split of F). With ``out`` each
    stage's tables are merged into ``out`` as soon as it is done; its resume log is in ``log``
    (default ``out``). ``progress``: a line per stage and progress bars; ``on_table(name, df)``
    after each table (the CLI prints some)."""
    cfg.check(model)  # before any work
    chosen = _chosen_units(model, cfg, units)
    log_dir = Path(log) if log is not None else (Path(out) if out is not None else None)
    logs = (lambda stage: log_dir / LOGS[stage]) if log_dir is not None else (lambda stage: None)
    label = model_label(model)
    tables: dict[str, pd.DataFrame] = {}

    def finish(stage: str, got: dict[str, pd.DataFrame]) -> None:
        tables.update(got)
        PDSFResult(**{name: got[name] for name in PDSFResult.STAGE_TABLES[stage]}).deliver(
            out, on_table, identity=run_identity(model).row()
        )

    geo_st = None
    if ("geometry",) in chosen:
        geo_st, got = _geometry_stage(model, cfg, label, logs("geometry"), progress)
        finish("geometry", got)
    single = [c for c in cfg.single_pass_conditions() if ("single_pass", c) in chosen]
    if single:
        finish("single_pass", _single_pass_stage(model, cfg, label, single, geo_st, logs("single_pass"), progress))
    gen = [c for c in cfg.generation_conditions() if ("generation", c) in chosen]
    if gen:
        finish("generation", _generation_stage(model, cfg, label, gen, logs("generation"), progress))
    return PDSFResult(**tables)


_units = units


def unit_cost(model: Model, cfg: PDSFConfig, unit: tuple) -> float:
    """A unit's estimated run time: prompts x seconds per prompt (the planner's calibration table's
    ``pdsf.unit.<stage>``, at 3 repeats and 16 new tokens: only their ratios matter, dealing units to ranks),
    scaled by the repeats of a single-pass edit and the tokens generated."""
    from ..planner import calibration

    stage = unit[0]
    per_prompt = calibration().value(f"pdsf.unit.{stage}")
    if stage == "geometry":
        return per_prompt * len(cfg.geometry_prompts())
    if stage == "single_pass":
        return per_prompt * len(cfg.single_pass_prompts()) * cfg.repeats / 3
    return per_prompt * len(cfg.generation_prompts()) * cfg.new_tokens / 16


# ---------------------------------------------------------------------------
# what a run costs (tlgeo plan): forward passes, generation and fits of each stage
# ---------------------------------------------------------------------------

# host work, priced by the planner's calibration table (tlgeo.planner.calibration): the geometry tables' float64 PCA
# fits, complexity and discrimination ("pdsf.geometry_fit", per prompt, state and d_model), each generation call's work
# besides its FLOPs ("pdsf.generation_call", per call of a batch and block: hooks, the KV cache's bookkeeping), and
# float64 products counted as FLOPs ("host.flop")


def _prompt_lengths(ps: PromptSet, cfg: PDSFConfig) -> list[int]:
    from ..planner import text_tokens

    return [text_tokens(t, bos=cfg.bos != "no") for t in ps.texts]


def _states_work(shape, name: str, ps: PromptSet, cfg: PDSFConfig):
    from ..planner import Work, padded_batches

    lengths = sorted(_prompt_lengths(ps, cfg))  # last_token_states batches prompts of similar lengths
    tokens, longest = padded_batches(lengths, cfg.batch_size)
    states = shape.n_layers + 1
    return Work(
        f"{name}: states",
        tokens,
        longest,
        cfg.batch_size,
        logit_copies=1 / longest,
        readout=len(ps) / tokens,
        host_bytes=states * len(ps) * shape.d_model * 4,
        note=f"{len(ps)} {ps.name} prompts, last-token states at {states} states, last position read out",
    )


def _geometry_plan(shape, cfg: PDSFConfig) -> list:
    """The geometry prompts' states and the geometry's float64 fits (host work)."""
    from ..planner import Work
    from .layer_stats import GRAM_CHUNK

    d, vocab, n_layers = shape.d_model, shape.vocab, shape.n_layers
    ps = cfg.geometry_prompts()
    states = len(cfg.layers) if cfg.layers is not None else n_layers + 1
    gram = 2 * d * d * vocab  # W_U W_Uᵀ once
    return [
        _states_work(shape, "geometry", ps, cfg),
        Work(
            "geometry: fits",
            0,
            1,
            host={"pdsf.geometry_fit": len(ps) * states * d, "host.flop": gram},
            host_bytes=(n_layers + 1) * len(ps) * d * 4 + d * (d + GRAM_CHUNK) * 8,
            note=f"float64 PCA fits, complexity and readout at {states} states (host)",
        ),
    ]


def _single_pass_plan(shape, cfg: PDSFConfig, conds: list[str]) -> list:
    """The single-pass prompts' states (unless the geometry's serve) and the clean and edited forwards."""
    from ..planner import Work, padded_batches
    from .single_pass import CLEAN_CACHE_BYTES

    d, vocab, n_layers, b = shape.d_model, shape.vocab, shape.n_layers, cfg.batch_size
    out = []
    ps = cfg.single_pass_prompts()
    if not (cfg.stage_runs("geometry") and cfg.single_pass_shares_geometry_prompts()):
        out.append(_states_work(shape, "single pass", ps, cfg))
    lengths, n = _prompt_lengths(ps, cfg), len(ps)
    tokens, longest = padded_batches(lengths, b)
    first = padded_batches(lengths[:b], b)[0]  # the first clean forward runs twice: read out whole, then stopped
    keep = n * vocab * 8 <= CLEAN_CACHE_BYTES
    passes = (1 if keep else len(conds)) + sum(
        cfg.repeats if c.rsplit("_", 1)[1] in ("rotate", "mix") else 1 for c in conds
    )
    layer = cfg.single_pass_layer or single_pass_layer(n_layers)
    out.append(
        Work(
            "single pass",
            passes * tokens + first,
            longest,
            b,
            readout=(first + passes * n) / (passes * tokens + first),
            host_bytes=n * (vocab + (n_layers - layer + 1) * d) * 8 if keep else 0.0,
            note=f"{len(conds)} condition(s) x {n} prompts: {passes} passes, last position read out",
        )
    )
    return out


def _generation_plan(shape, cfg: PDSFConfig, conds: list[str]) -> list:
    """The generation prompts' states, the unedited and rotated continuations, their KL and F's dynamics."""
    from math import ceil

    from ..planner import PPL_LOGIT_COPIES, Work, padded_batches
    from .dynamics import MAX_COV_WIDTH

    d, vocab, n_layers, b = shape.d_model, shape.vocab, shape.n_layers, cfg.batch_size
    ps = cfg.generation_prompts()
    n, new, c = len(ps), cfg.new_tokens, len(conds)
    prefill, longest = padded_batches(_prompt_lengths(ps, cfg), b)
    steps, calls = prefill + n * (new - 1), ceil(n / b) * new  # step 0 is the prefill
    call_s = {"pdsf.generation_call": calls * n_layers}
    kv = 2 * n_layers * shape.n_kv_heads * shape.d_head * b * (longest + new) * 4
    forced = prefill + n * new  # each prompt and its continuation, one forward per batch
    cached = n * new * vocab * 4 <= KL_CACHE_BYTES
    cov = n_layers if d <= MAX_COV_WIDTH else 1  # the temporal covariance of F per layer, float64 on the host
    return [
        _states_work(shape, "generation", ps, cfg),
        Work(
            "generation: unedited",
            steps,
            longest + new,
            b,
            kept_bytes=kv,
            host=call_s,
            note=f"{n} {ps.name} prompts x {new} tokens, KV cache",
        ),
        Work(
            "generation: rotations",
            c * steps,
            longest + new,
            c * b,
            kept_bytes=c * kv,
            host=call_s,
            note=f"{c} condition(s) x {n} prompts x {new} tokens, KV cache, every condition's rows in one generation",
        ),
        Work(
            "generation: KL",
            (c + (1 if cached else c)) * forced,
            longest + new,
            b,
            logit_copies=PPL_LOGIT_COPIES,
            kept_bytes=n * new * vocab * 4 if cached else 0.0,
            note="teacher-forced, clean " + ("once" if cached else "per condition"),
        ),
        Work(  # the covariances and their eigenvectors (~9 d^3)
            "generation: F dynamics",
            forced,
            longest + new,
            b,
            host={"host.flop": cov * (2 * n * new * d * d + 9 * d**3)},
            host_bytes=b * new * d * 8 * n_layers + cov * d * d * 8,
            note=f"float64 covariances at {cov} layer(s) (host)",
        ),
    ]


def plan(shape, cfg: PDSFConfig) -> list:
    """Per stage: the prompts' states (one forward per batch); the geometry's float64 fits (host
    work); the single-pass edits (a clean and ``repeats`` edited forwards per batch, stopped at
    the last block and read out at the last position); the unedited and rotated continuations
    (a prefill and ``new_tokens - 1`` single-token steps with the KV cache, per prompt and
    condition), their teacher-forced KL and the split of F along them. Prompt lengths from their
    characters (the chat template's own tokens are not counted)."""
    cfg.check_depth(shape.n_layers)
    out = []
    if cfg.stage_runs("geometry"):
        out += _geometry_plan(shape, cfg)
    conds = cfg.single_pass_conditions()
    if conds:
        out += _single_pass_plan(shape, cfg, conds)
    conds = cfg.generation_conditions()
    if conds:
        out += _generation_plan(shape, cfg, conds)
    return out


def support(family: Family) -> Support:
    """PDSF on ``family``: residual states and the unembedding, on every family."""
    return Support("yes")


ANALYSIS = register_analysis(
    Analysis(
        "pdsf",
        PDSFConfig,
        run,
        PDSFResult,
        units,
        "prediction-anchored subspaces: P, D, S, F at every layer; single-pass edits; persistent rotations (seed "
        "paper 001)",
        tiny=dict(
            geometry_per_group=2,
            layers=(0, 2),
            single_pass=("D_rotate", "F_attenuate"),
            single_pass_per_group=1,
            repeats=1,
            per_group=1,
            new_tokens=3,
            conditions=("D", "random"),
        ),
        cost=unit_cost,
        plan=plan,
        support=support,
        docs="analyses/pdsf",
    )
)
