#!/usr/bin/env python
"""Tables of a compression experiment: quality per method and the prediction test.

    .venv/bin/python scripts/compress_report.py --out results/compression-objectives/smollm2-135m \
        --tasks piqa,arc_easy,winogrande --limit 300

Reads from ``--out`` what ``tlgeo compress`` (``ppl.csv``, ``zeroshot.jsonl``,
``compress_log.jsonl``) and ``tlgeo compression`` (``table12.csv``) wrote there, and writes
``quality.csv`` (method, PPL, pooled zero-shot accuracy, paired change against the
method's llmcompressor baseline with a bootstrap CI, compression seconds),
``prediction_corr.csv`` and ``prediction_comp.csv`` (:func:`tlgeo.compression.evaluation.prediction_test`)
and ``prediction_log_ppl.png`` / ``prediction_acc_drop.png`` (local block error against
quality, one point per model); prints the headline rows as markdown.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tlgeo.compression.evaluation import prediction_test, quality_table  # noqa: E402
from tlgeo.compression.plots import plot_prediction  # noqa: E402
from tlgeo.evals.zeroshot import logged_items  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tasks", default="piqa,arc_easy,winogrande")
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--ppl-tokens", type=int, default=None, help="the ppl.csv rows to use (default: the largest)")
    ap.add_argument("--n-boot", type=int, default=2000)
    args = ap.parse_args(argv)
    out = Path(args.out)
    ppl = pd.read_csv(out / "ppl.csv")
    tokens = args.ppl_tokens or int(ppl["tokens"].max())
    ppl = ppl[ppl["tokens"] == tokens]
    tasks = [t for t in args.tasks.split(",") if t]
    items = {}
    for m in ppl["method"]:
        try:
            items[m] = logged_items(out / "zeroshot.jsonl", m, tasks, args.limit)
        except (KeyError, FileNotFoundError) as e:
            print(f"[{m}] {e}; no zero-shot columns", file=sys.stderr)
    seconds = {}
    if (out / "compress_log.jsonl").exists():
        for line in (out / "compress_log.jsonl").read_text().splitlines():
            rec = json.loads(line)
            seconds[rec["method"]] = rec["seconds"]  # the latest run of each method
    q = quality_table(ppl, items, seconds, n_boot=args.n_boot)
    q.to_csv(out / "quality.csv", index=False)
    cols = [c for c in ("method", "ppl", "acc", "baseline", "delta_acc", "ci_low", "ci_high", "p", "seconds") if c in q]
    print(q[cols].to_markdown(index=False, floatfmt=".4g"))
    if (out / "table12.csv").exists():
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        table12 = pd.read_csv(out / "table12.csv")
        corr, comp = prediction_test(table12, q, n_boot=args.n_boot)
        for target in ("log_ppl", "acc_drop"):
            if target == "acc_drop" and "acc" not in q:
                continue
            fig = plot_prediction(table12, q, target=target)
            fig.savefig(out / f"prediction_{target}.png", dpi=110)
            plt.close(fig)
        corr.to_csv(out / "prediction_corr.csv", index=False)
        comp.to_csv(out / "prediction_comp.csv", index=False)
        sel = (comp["ref"] == "delta") & (comp["tokens"] == "all")
        print()
        print(comp[sel].drop(columns=["ref", "tokens"]).to_markdown(index=False, floatfmt=".3g"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
