"""Circuit discovery on the analysis contract: ``run(model, CircuitConfig(...)) -> CircuitResult``.

One work unit per task: build its prompts (:mod:`tlgeo.patching.tasks`), score every edge (:mod:`.eap`, or exact
edge patching, :mod:`.edges`), draw the faithfulness curve over k (:mod:`.circuit`) with the smallest k reaching
each level, and check the top edges against exact edge patching. Each stage (scores, curve, verification) is one
line of ``<log>/circuits.jsonl``, written when it is done, so an interrupted run resumes at the next stage.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..models import Model, model_label
from ..patching.tasks import Task, build_task
from ..runner.analysis import Analysis, Result, Table, register_analysis
from ..runner.identity import identified, run_identity
from ..runner.results import ResultLog, content_digest
from .circuit import (
    curve_area,
    default_ks,
    faithfulness_curve,
    k_at,
    rank_agreement,
    ranked_edges,
    smallest_faithful_k,
    verify_edges,
)
from .config import CircuitConfig
from .eap import EDGE_COLUMNS, SCORE_COLUMNS, EdgeScores, eap_scores, run_metric
from .edges import exact_scores
from .graph import Graph, check_graph_support, graph_of

__all__ = ["CircuitResult", "run", "units", "plan", "ANALYSIS"]

SETTINGS = ("task", "prompts", "seed", "method", "ig_steps")
KEY = ("model", *SETTINGS)
LOG_KEY = (*KEY, "stage", "inputs")


@dataclass
class CircuitResult(Result):
    """``summary``: per task and method, the task's metrics (clean, corrupted, their gap), the graph's edges, the
    smallest k reaching 80 % and 90 % of the gap (``k80``, ``k90``), the faithfulness curve's ``area``, the rank
    agreement of the top ``verified`` edges' scores with exact edge patching (``spearman`` of their sizes,
    ``sign_agreement``), and the cost: ``score_seconds``, ``forward_seconds`` (one clean forward of the same
    prompts), their ratio ``forward_equivalents`` and ``score_bytes`` (the score matrices);
    ``edges``: one row per edge (:data:`~.eap.EDGE_COLUMNS`, its ``score`` in metric units, mean over prompts:
    the metric change when this edge alone reads the corrupted sender, to first order for EAP; its parts
    ``score_par`` / ``score_perp`` (the sender's change along / across the receiver's residual) and, for a head
    sender, ``score_self`` / ``score_nonself``; ``rank`` by ``|score|``); ``faithfulness``: per k the metric with
    every edge outside the top k reading the corrupted run and the share of the gap ``recovered``; ``verify``: the
    top edges' ``score`` beside their ``exact`` edge-patching change."""

    TABLES = (
        Table(
            "summary", KEY, "circuit_summary.csv", volatile=("score_seconds", "forward_seconds", "forward_equivalents")
        ),
        Table("edges", (*KEY, "sender", "receiver"), "circuit_edges.csv.gz"),
        Table("faithfulness", (*KEY, "k"), "circuit_faithfulness.csv"),
        Table("verify", (*KEY, "sender", "receiver"), "circuit_verify.csv"),
    )


def units(model: Model, cfg: CircuitConfig) -> list[tuple]:
    """One unit per task."""
    return [("circuit", t) for t in cfg.tasks]


def _metric(task: Task):
    return lambda logits, rows: task.subset(rows).score(logits)


def _digest(task: Task) -> str:
    return content_digest(task.clean, task.corrupted, task.correct, task.wrong, task.metric)


def _scores(model: Model, graph: Graph, task: Task, cfg: CircuitConfig, clean_metric: float) -> EdgeScores:
    if cfg.method != "exact":
        return eap_scores(
            model, task.clean, task.corrupted, _metric(task), ig_steps=cfg.steps, batch_size=cfg.batch_size
        )
    s_idx, r_idx = torch.nonzero(graph.valid, as_tuple=True)
    got = exact_scores(
        model,
        graph,
        task.clean,
        task.corrupted,
        list(zip(s_idx.tolist(), r_idx.tolist())),
        _metric(task),
        clean_metric=clean_metric,
        batch_size=cfg.batch_size,
        max_rows=cfg.max_rows,
    )
    out = EdgeScores.zeros(graph)
    out.score[s_idx, r_idx] = got
    out.par[s_idx, r_idx] = math.nan  # exact patching of a whole edge: no parts
    out.self_[s_idx, r_idx] = math.nan
    out.n = task.n
    return out


def _forward_seconds(model: Model, task: Task, batch_size: int) -> float:
    t = time.perf_counter()
    with torch.no_grad():
        for start in range(0, task.n, batch_size):
            model(task.clean[start : start + batch_size])
    return time.perf_counter() - t


@identified
def run(
    model: Model,
    cfg: CircuitConfig,
    *,
    out: str | Path | None = None,
    log: str | Path | None = None,
    units: Sequence[tuple] | None = None,
    progress: bool = False,
    on_table: Any = None,
) -> CircuitResult:
    """Every unit of ``cfg`` (or ``units``); with ``out`` the tables are merged into ``out`` and the log kept in
    ``log`` (default ``out``)."""
    check_graph_support(model)
    chosen = globals()["units"](model, cfg) if units is None else [tuple(u) for u in units]
    log_dir = Path(log) if log is not None else (Path(out) if out is not None else None)
    rlog = (
        ResultLog(log_dir / "circuits.jsonl", LOG_KEY, identity=run_identity(model).row(), content=("inputs",))
        if log_dir is not None
        else None
    )
    label, graph = model_label(model), graph_of(model)
    tables: dict[str, list[pd.DataFrame]] = {t.name: [] for t in CircuitResult.TABLES}
    for _, name in chosen:
        got = _unit(model, cfg, graph, name, label, rlog, progress)
        for k, v in got.items():
            tables[k].append(v)
    res = CircuitResult(**{k: pd.concat(v, ignore_index=True) if v else None for k, v in tables.items()})
    return res.deliver(out, on_table, identity=run_identity(model).row())


def _stage(rlog: ResultLog | None, base: dict, stage: str, compute) -> dict:
    """A stage's log row: read back where a run finished it with the same prompts, else computed and logged."""
    if rlog is not None:
        got = rlog.get(**base, stage=stage)
        if got is not None:
            return got
    row = {**base, "stage": stage, **compute()}
    if rlog is not None:
        rlog.add(row)
    return row


def _curve_stage_name(cfg: CircuitConfig) -> str:
    """The resume log's name of the curve stage, with the settings it depends on (a rerun with others computes it)."""
    ks = "default" if cfg.k is None else ",".join(map(str, cfg.k))
    return f"curve k={ks} levels={','.join(f'{v:g}' for v in cfg.levels)} tolerance={cfg.k_tolerance:g}"


def _run_metrics(model: Model, task: Task, metric, cfg: CircuitConfig) -> dict:
    """The runs stage: the mean metric of the clean and of the corrupted prompts."""
    means = {}
    for name, tokens in (("clean_metric", task.clean), ("corrupted_metric", task.corrupted)):
        got = [
            run_metric(model, tokens[i : i + cfg.batch_size], metric, slice(i, i + cfg.batch_size))
            for i in range(0, task.n, cfg.batch_size)
        ]
        means[name] = float(torch.cat(got).double().mean())
    return means


def _score_stage(
    model: Model, graph: Graph, task: Task, cfg: CircuitConfig, clean_metric: float, idx: tuple[Tensor, Tensor]
) -> dict:
    """The scores stage: every valid edge's scores (at ``idx``, the valid (sender, receiver) pairs) and their cost."""
    s_idx, r_idx = idx
    fwd = _forward_seconds(model, task, cfg.batch_size)
    t = time.perf_counter()
    sc = _scores(model, graph, task, cfg, clean_metric)
    secs = time.perf_counter() - t
    return dict(
        score_seconds=secs,
        forward_seconds=fwd,
        score_bytes=3 * sc.score.numel() * sc.score.element_size(),
        **{c: sc.matrix(c)[s_idx, r_idx].tolist() for c in ("score", "score_par", "score_self")},
    )


def _logged_scores(graph: Graph, row: dict, idx: tuple[Tensor, Tensor]) -> EdgeScores:
    """The edge scores of a scores stage's log row, back in their ``[senders, receivers]`` matrices (float64)."""
    sc = EdgeScores.zeros(graph)
    sc.score[idx] = torch.tensor(row["score"], dtype=torch.float64)
    sc.par[idx] = torch.tensor(row["score_par"], dtype=torch.float64)
    sc.self_[idx] = torch.tensor(row["score_self"], dtype=torch.float64)
    return sc


def _curve_stage(model: Model, graph: Graph, task: Task, metric, order, cfg: CircuitConfig, kw: dict) -> dict:
    """The curve stage: the faithfulness curve over k, refined to the smallest k reaching each level."""
    ks = [k for k in (cfg.k or default_ks(graph.n_edges)) if k <= graph.n_edges]
    ks = sorted({0, graph.n_edges, *ks})
    c = faithfulness_curve(model, graph, task.clean, task.corrupted, metric, order, ks, **kw)
    for level in cfg.levels:
        c = smallest_faithful_k(
            model, graph, task.clean, task.corrupted, metric, order, c, level, tolerance=cfg.k_tolerance, **kw
        )
    return {"curve": c.to_dict(orient="list")}


def _verify_stage(
    model: Model, graph: Graph, task: Task, metric, order, cfg: CircuitConfig, clean_metric: float
) -> dict:
    """The verify stage: the top ``cfg.verify`` edges and their exact edge-patching scores."""
    top = order[: cfg.verify]
    exact = verify_edges(
        model,
        graph,
        task.clean,
        task.corrupted,
        metric,
        top,
        clean_metric=clean_metric,
        batch_size=cfg.batch_size,
        max_rows=cfg.max_rows,
    )
    return {"edges": [list(e) for e in top], "exact": exact.tolist()}


def _summary(
    keys: dict, task: Task, graph: Graph, m: dict, c: pd.DataFrame, agree: dict, verified: int, row: dict, cfg
) -> pd.DataFrame:
    """A task's one-row summary: its metrics, k at each level, the curve's area, the agreement and the cost."""
    clean_metric, corrupted_metric = m["clean_metric"], m["corrupted_metric"]
    levels = {f"k{round(100 * lv)}": k_at(c, lv) for lv in cfg.levels}
    return pd.DataFrame(
        [
            {
                **keys,
                "n": task.n,
                "clean_metric": clean_metric,
                "corrupted_metric": corrupted_metric,
                "gap": clean_metric - corrupted_metric,
                "edges": graph.n_edges,
                **levels,
                "area": curve_area(c),
                "verified": verified,
                **agree,
                "score_seconds": row["score_seconds"],
                "forward_seconds": row["forward_seconds"],
                "forward_equivalents": row["score_seconds"] / max(row["forward_seconds"], 1e-9),
                "score_bytes": row["score_bytes"],
            }
        ]
    )


def _unit(
    model: Model, cfg: CircuitConfig, graph: Graph, name: str, label: str, rlog: ResultLog | None, progress: bool
) -> dict[str, pd.DataFrame]:
    task = build_task(name, model, n=cfg.prompts, seed=cfg.seed)
    metric = _metric(task)
    keys = dict(model=label, task=name, prompts=cfg.prompts, seed=cfg.seed, method=cfg.method, ig_steps=cfg.steps)
    base = {**keys, "inputs": _digest(task)}
    idx = torch.nonzero(graph.valid, as_tuple=True)
    m = _stage(rlog, base, "runs", lambda: _run_metrics(model, task, metric, cfg))
    clean_metric, corrupted_metric = m["clean_metric"], m["corrupted_metric"]
    if progress:
        print(
            f"  {name}: {task.n} prompts, metric clean {clean_metric:.3f} / corrupted {corrupted_metric:.3f}; "
            f"{graph.n_edges} edges",
            flush=True,
        )
    row = _stage(rlog, base, "scores", lambda: _score_stage(model, graph, task, cfg, clean_metric, idx))
    sc = _logged_scores(graph, row, idx)
    edges = sc.table().assign(**keys)
    order = ranked_edges(graph, sc.score)
    kw = dict(
        clean_metric=clean_metric, corrupted_metric=corrupted_metric, batch_size=cfg.batch_size, max_rows=cfg.max_rows
    )
    curve = _stage(rlog, base, _curve_stage_name(cfg), lambda: _curve_stage(model, graph, task, metric, order, cfg, kw))
    c = pd.DataFrame(curve["curve"])
    v = (
        _stage(
            rlog,
            base,
            f"verify {cfg.verify}",
            lambda: _verify_stage(model, graph, task, metric, order, cfg, clean_metric),
        )
        if cfg.verify
        else {"edges": [], "exact": []}
    )
    top = [tuple(e) for e in v["edges"]]
    est = np.array([float(sc.score[s, r]) for s, r in top])
    verify_df = pd.DataFrame(
        {
            **keys,
            "sender": [graph.senders["sender"][s] for s, _ in top],
            "receiver": [graph.receivers["receiver"][r] for _, r in top],
            "rank": np.arange(1, len(top) + 1),
            "score": est,
            "exact": v["exact"],
        }
    )
    agree = rank_agreement(est, np.array(v["exact"]))
    summary = _summary(keys, task, graph, m, c, agree, len(top), row, cfg)
    cols = [*KEY, *EDGE_COLUMNS, *SCORE_COLUMNS, "rank"]
    return dict(summary=summary, edges=edges[cols], faithfulness=c.assign(**keys)[[*KEY, *c.columns]], verify=verify_df)


# prompt lengths in tokens, BOS included, measured on SmolLM2's tokenizer (the planner has no tokenizer)
PROMPT_TOKENS = {"ioi": 18, "agreement": 4, "greater_than": 15, "induction": 20, "predecessor": 13, "lookback": 14}


def plan(shape, cfg: CircuitConfig) -> list:
    """The task's runs, the scores (EAP: a forward and backward, about 3 forwards; EAP-IG: that per step and a
    clean forward; exact: a forward per edge), the faithfulness curve (a forward per point, about 30 with the
    bisections) and the verified edges (a forward each), per task."""
    return [w for task in cfg.tasks for w in _plan_task(shape, cfg, task)]


def _plan_task(shape, cfg: CircuitConfig, task: str) -> list:
    from ..planner import Work

    L = PROMPT_TOKENS.get(task, 16)
    n, tokens = shape.n_layers, cfg.prompts * L
    n_kv = getattr(shape, "n_kv_heads", shape.n_heads)
    graph = Graph(n, shape.n_heads, n_kv)
    kept = 2 * (graph.n_senders + 8) * tokens * shape.d_model * 4 + 3 * graph.n_senders * graph.n_receivers * 8
    scores = {"eap": 4, "eap-ig": 3 * cfg.ig_steps + 2, "exact": graph.n_edges + 2}[cfg.method]
    steps = 10 if cfg.k_tolerance <= 0 else max(1, math.ceil(math.log2(1 / min(cfg.k_tolerance, 0.5))) + 1)
    points = len(default_ks(graph.n_edges) if cfg.k is None else cfg.k) + steps * len(cfg.levels)
    return [
        Work(
            f"{task}: {cfg.method} scores",
            scores * tokens,
            L,
            cfg.batch_size,
            kept_bytes=kept,
            note=f"{graph.n_edges} edges",
        ),
        Work(
            f"{task}: faithfulness curve",
            points * tokens,
            L,
            cfg.batch_size,
            kept_bytes=kept,
            note=f"{points} circuits",
        ),
        Work(
            f"{task}: exact check of the top edges",
            cfg.verify * tokens,
            L,
            cfg.max_rows,
            kept_bytes=kept,
            note=f"{cfg.verify} edges",
        ),
    ]


ANALYSIS = register_analysis(
    Analysis(
        "circuits",
        CircuitConfig,
        run,
        CircuitResult,
        units,
        "circuit discovery: every edge scored (EAP, EAP-IG or exact) and split by the geometry of the sender's write; "
        "faithfulness curves",
        tiny=dict(tasks=("induction", "predecessor"), prompts=4, ig_steps=2, verify=5, k=(0, 5, 20)),
        command="circuit",
        plan=plan,
        docs="analyses/circuits",
    )
)
