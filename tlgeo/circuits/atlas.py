"""The circuits step of ``tlgeo atlas``.

``circuits``: IOI on a few prompts, every edge of the model's graph scored by EAP (one clean and one corrupted
forward and one backward), each score split by the part of the sender's write (along / across the receiver's
residual; a head's self message and the rest); the faithfulness curve over k with the smallest k reaching 80 % and
90 % of the clean - corrupted gap, and the top edges checked by exact edge patching, in small forwards (memory).
``tlgeo circuit`` runs EAP-IG, more prompts and tasks. The section draws from the saved tables (no model).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..runner.analysis import Headline, StepContext, atlas_budgets, register_analysis_step, register_chapter
from .analysis import ANALYSIS, CircuitResult
from .config import CircuitConfig
from .plots import dominant_part

__all__ = ["CHAPTER", "CircuitBudgets", "headline", "top_edges"]

CHAPTER = "circuits"
SMALL = 16  # prompts below which a circuit is an indication only
SHOWN = 10  # top edges in the section's table

# k_tolerance 0.1 and verify 5: the step's forwards are the faithfulness curve's circuits, the bisection for k80 and
# k90 (one step per halving of the bracket: down to one edge when exact, to a tenth of k here) and the verified
# edges' (95 bare forwards of the atlas's 299 at f0c8313, results/bench-atlas, with exact bisection and 10 edges).
# batch_size 2, max_rows 16: on SmolLM2-135M, 8 IOI prompts, one thread, the step's peak memory grows with the prompts
# per forward (EAP's scores: 2.8 GB at 8, 2.0 GB at 4, 1.6 GB at 2; the atlas's target is 1.8 GiB)
CircuitBudgets = atlas_budgets(
    CircuitConfig,
    "circuits_",
    ("tasks", "prompts", "method", "ig_steps", "k", "k_tolerance", "verify", "batch_size", "max_rows"),
    method="eap",
    k_tolerance=0.1,
    verify=5,
    batch_size=2,
    max_rows=16,
)


def top_edges(edges: pd.DataFrame, n: int = SHOWN) -> pd.DataFrame:
    """The ``n`` top edges of one task's ``edges`` table by rank, with their parts and ``part`` (the dominant one of
    the sender's write: along / across the receiver's residual)."""
    top = edges.nsmallest(n, "rank")
    cols = [
        "rank",
        "sender",
        "receiver",
        "receiver_input",
        "score",
        "score_par",
        "score_perp",
        "score_self",
        "score_nonself",
    ]
    return top[cols].assign(part=dominant_part(top).to_numpy())


def _k(v) -> str:
    return "not reached" if v is None or (isinstance(v, float) and math.isnan(v)) else str(int(v))


def headline(out: Path, budgets: CircuitBudgets | None = None) -> Headline:
    """Per task: the circuit's size at 80 % / 90 % of the gap, of how many edges, and its top edge with the part of
    the sender's write that carries it."""
    summary_csv, edges_csv = Path(out) / "circuit_summary.csv", Path(out) / "circuit_edges.csv.gz"
    if not (summary_csv.exists() and edges_csv.exists()):
        return Headline()
    summary, edges = pd.read_csv(summary_csv), pd.read_csv(edges_csv)
    sentences, warnings = [], []
    for _, s in summary.iterrows():
        e = edges[(edges["task"] == s["task"]) & (edges["method"] == s["method"])]
        if e.empty:
            continue
        top = top_edges(e, 1).iloc[0]
        side = "along" if top["part"] == "par" else "across"
        agree = (
            ""
            if pd.isna(s["spearman"])
            else f"; its top {int(s['verified'])} edges against exact edge patching: Spearman {s['spearman']:.2f}"
        )
        sentences.append(
            f"Circuits ({s['task']}, {s['method']}): {_k(s['k80'])} of {int(s['edges'])} edges recover 80 % of the "
            f"clean - corrupted gap, {_k(s['k90'])} recover 90 %; the top edge {top['sender']} -> {top['receiver']} "
            f"({top['score']:.3g}) acts mostly through the sender's write {side} the receiver's residual{agree}."
        )
        if int(s["n"]) < SMALL:
            warnings.append(f"Circuits: {int(s['n'])} {s['task']} prompts: indication only.")
    return Headline(sentences, warnings)


register_chapter(CHAPTER, CircuitBudgets, headline=headline, title="Circuit discovery with geometry-resolved edges")


@register_analysis_step(
    "circuits",
    CHAPTER,
    ANALYSIS,
    lambda b: b.config(),
    "circuit discovery: every edge scored, split by the sender's write; faithfulness curves",
)
def _section(ctx: StepContext, result: CircuitResult) -> None:
    from .plots import circuit_figure, faithfulness_figure

    cfg, summary = ctx.config, result.summary
    small = " Indication only at this budget." if cfg.prompts < SMALL else ""
    ctx.report.section(
        "Circuit discovery with geometry-resolved edges",
        f"Clean and corrupted prompts of {', '.join(cfg.tasks)} ({cfg.prompts} per task). Every edge of the model's "
        "graph (the input, each head's query, key and value inputs, each MLP, the logits) is scored by "
        f"{cfg.method.upper()}: the first-order change of the task metric when that edge alone reads the corrupted "
        "run's sender, split by the sender's change along (par) / across (perp) the receiver's residual. A circuit is "
        "the k edges of largest |score|; its run has every other edge read the corrupted run, and 'recovered' is the "
        "share of the clean - corrupted gap it keeps (k80, k90: the smallest k reaching 80 % / 90 %"
        + (f", overstated by less than {cfg.k_tolerance:.0%}" if cfg.k_tolerance else "")
        + ")."
        + small,
    )
    if summary is None or summary.empty:
        return
    cols = [
        c
        for c in (
            "task",
            "method",
            "n",
            "clean_metric",
            "corrupted_metric",
            "gap",
            "edges",
            "k80",
            "k90",
            "area",
            "verified",
            "spearman",
            "sign_agreement",
        )
        if c in summary.columns
    ]
    ctx.report.table(
        summary[cols],
        "Per task: the circuit's size at 80 % and 90 % of the gap, the faithfulness "
        "curve's area over the share of edges kept, and the rank agreement of the top "
        "edges' scores with exact edge patching.",
    )
    for _, s in summary.iterrows():
        task, method = s["task"], s["method"]
        curve = result.faithfulness
        curve = curve[(curve["task"] == task) & (curve["method"] == method)] if curve is not None else curve
        if curve is not None and len(curve):
            ctx.report.figure(
                faithfulness_figure(curve, levels=cfg.levels, label=task),
                f"{task}: the share of the clean - corrupted gap recovered by the circuit of the k top "
                f"edges ({method}), against k (dashed: {', '.join(f'{v:.0%}' for v in cfg.levels)}).",
            )
        edges = result.edges[(result.edges["task"] == task) & (result.edges["method"] == method)]
        if edges.empty:
            continue
        k = int(s["k80"]) if not pd.isna(s["k80"]) else min(SHOWN, len(edges))
        k = max(1, min(k, 40))  # a drawing of more than 40 edges is unreadable
        ctx.report.figure(
            circuit_figure(edges, k, title=f"{task}: the {k} top edges"),
            f"{task}: the {k} top edges ({'the circuit at 80 %' if k == s['k80'] else 'by |score|'}); "
            "colour: the part of the sender's write that carries the score, line: the receiver's input, "
            "width: |score|.",
        )
        ctx.report.table(
            top_edges(edges),
            f"{task}: the {SHOWN} top edges by |score| with their parts (par + perp = "
            "score; a head sender's self + nonself = score) and the dominant part.",
        )
