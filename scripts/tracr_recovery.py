"""Circuit discovery against the compiled tracr programs' known edges: per program and method, the smallest k whose
circuit recovers ``--level`` of the clean - corrupted gap and the precision and recall of its edges.

For each compiled program in ``zoo/tracr-*`` (``tlgeo.models.tracr_truth``), the ``tracr`` task's ``--prompts``
prompt pairs, every edge scored by EAP, EAP-IG (``--ig-steps``) and exact edge patching (``tlgeo.circuits``), the
smallest k reaching ``--level`` (``k90`` at 0.9), and the circuit's precision and recall against the program's edges:
``recall`` over all of them, ``recall_visible`` over those the prompts can show
(:func:`tlgeo.circuits.truth.visible_edges`: the sender's write differs between the runs in what the receiver reads,
and the receiver computes differently). ``tests/circuits/test_tracr_recovery.py`` checks these numbers and says
what each method misses and why.

    python scripts/tracr_recovery.py [--prompts 16] [--seed 0] [--ig-steps 5] [--level 0.9] [--out DIR]

With ``--out``, one row per program and method is appended to ``DIR/recovery.csv`` with the commit that measured it,
and the run's line to ``DIR/provenance.jsonl``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ("frac_prevs", "reverse", "hist", "sort", "detect_pattern")
METHODS = ("eap", "eap-ig", "exact")


def measure(program: str, prompts: int, seed: int, ig_steps: int, level: float) -> list[dict]:
    """One row per method: the program's edge counts, the task's gap, k at ``level`` and the recovery there."""
    from tlgeo.circuits.analysis import run
    from tlgeo.circuits.config import CircuitConfig
    from tlgeo.circuits.truth import recovery, visible_edges
    from tlgeo.models import load_model
    from tlgeo.models.tracr_truth import program_truth
    from tlgeo.patching.tasks import build_task

    model = load_model(str(ROOT / "zoo" / ("tracr-" + program.replace("_", "-"))))
    truth = program_truth(model)
    task = build_task("tracr", model, n=prompts, seed=seed)
    visible = visible_edges(model, truth, task.clean, task.corrupted)
    rows = []
    for method in METHODS:
        res = run(
            model,
            CircuitConfig(
                tasks=("tracr",),
                prompts=prompts,
                seed=seed,
                method=method,
                ig_steps=ig_steps,
                verify=0,
                levels=(level,),
            ),
        )
        s = res.summary.iloc[0]
        k = s[f"k{round(100 * level)}"]
        rec = recovery(res.edges, int(k), truth, visible) if k == k else {}
        rows.append(
            dict(
                program=program,
                method=method,
                prompts=prompts,
                seed=seed,
                ig_steps=ig_steps if method == "eap-ig" else 0,
                level=level,
                gap=float(s["gap"]),
                graph_edges=int(s["edges"]),
                program_edges=len(truth["edges"]),
                visible_edges=int(visible["visible"].sum()),
                k=k,
                precision=rec.get("precision"),
                recall=rec.get("recall"),
                recall_visible=rec.get("recall_visible"),
                missed_visible=" ".join("-".join(e) for e in rec.get("missed_visible", [])),
                extra=" ".join("-".join(e) for e in rec.get("extra", [])),
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ig-steps", type=int, default=5)
    p.add_argument("--level", type=float, default=0.9)
    p.add_argument("--out", default=None, help="folder of recovery.csv and provenance.jsonl (default: print only)")
    a = p.parse_args(argv)
    if not 0 < a.level <= 1:
        p.error(f"--level must be in (0, 1], got {a.level}")
    rows = [r for prog in PROGRAMS for r in measure(prog, a.prompts, a.seed, a.ig_steps, a.level)]
    import pandas as pd

    cols = [
        "program",
        "method",
        "graph_edges",
        "program_edges",
        "visible_edges",
        "k",
        "precision",
        "recall",
        "recall_visible",
        "extra",
    ]
    print(pd.DataFrame(rows)[cols].to_string(index=False))
    if a.out:
        from tlgeo.runner.provenance import record_table

        path = record_table(
            a.out, "recovery", rows, [sys.argv[0], *(sys.argv[1:] if argv is None else argv)], settings=vars(a)
        )
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
