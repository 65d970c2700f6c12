#!/usr/bin/env python
"""Compression time of each direction-aware objective against its llmcompressor baseline,
measured side by side in one run on the same calibration data (target: ratio <= 2).

    .venv/bin/python scripts/bench_compress.py --model smollm2-135m --n-calib 32

Pairs: ``awq`` / ``awq_perp``, ``sgpt`` / ``sgpt_perp_l<lambda>`` (``--refit-iters``),
``wanda`` / ``owl`` / ``perpalloc``. The time is llmcompressor's ``oneshot`` (plus, for
``owl``, the outlier ratios); ``perpalloc`` is timed with its sensitivities given -- the
diagnosis of the uniform model that supplies them is timed separately (``diag_seconds``).
Models are written to a temporary directory and deleted.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tlgeo.compression.llmc import calibration_windows, compress_model, quiet_llmcompressor  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--n-calib", type=int, default=32)
    ap.add_argument("--awq-grid", type=int, default=20)
    ap.add_argument("--refit-iters", type=int, default=12)
    ap.add_argument("--lam", type=float, default=0.5, help="lambda of the sgpt_perp refit")
    ap.add_argument("--pairs", default="awq,sgpt,wanda")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--verbose", action="store_true", help="llmcompressor's INFO log (default: its warnings only)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    quiet_llmcompressor(args.verbose)
    from transformers import AutoTokenizer

    from tlgeo.compression.allocation import perp_sensitivity
    from tlgeo.compression.compress import base_dir  # the same model resolution as tlgeo compress
    from tlgeo.compression.counterfactual import diagnose, prompt_windows
    from tlgeo.compression.decompose import summarize_layers
    from tlgeo.data import load_text
    from tlgeo.models import load_model

    src = base_dir(args.model)
    calib = calibration_windows(AutoTokenizer.from_pretrained(src), "wikitext2-valid", args.n_calib, 128)
    groups = {
        "awq": ["awq", "awq_perp"],
        "sgpt": ["sgpt", f"sgpt_perp_l{args.lam:g}"],
        "wanda": ["wanda", "owl", "perpalloc"],
    }
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for pair in [p for p in args.pairs.split(",") if p]:
            times = {}
            for m in groups[pair]:
                sens = None
                if m == "perpalloc":
                    t0 = time.perf_counter()
                    base = load_model(args.model)
                    toks = prompt_windows(base, load_text("wikitext2"), 12, 128)
                    layers = summarize_layers(diagnose(base, {"wanda": Path(tmp) / "wanda"}, toks, modes=("local",)))
                    sens = perp_sensitivity(layers, "wanda").tolist()
                    times["diag_seconds"] = time.perf_counter() - t0
                    del base
                man = compress_model(
                    src,
                    m,
                    Path(tmp) / m,
                    calib=calib,
                    awq_n_grid=args.awq_grid,
                    refit_iters=args.refit_iters,
                    sensitivity=sens,
                )
                times[m] = man["seconds"]
                print(f"[{m}] {man['seconds']:.1f} s", flush=True)
            base_m = groups[pair][0]
            for m in groups[pair][1:]:
                rows.append((m, base_m, times[m], times[base_m], times[m] / times[base_m]))
            if "diag_seconds" in times:
                print(f"  (perpalloc's sensitivity: uniform Wanda diagnosis {times['diag_seconds']:.1f} s)")
    print(f"\n{'objective':>16} {'baseline':>8} {'s':>7} {'base s':>7} {'ratio':>6}")
    for m, b, t, tb, r in rows:
        print(f"{m:>16} {b:>8} {t:7.1f} {tb:7.1f} {r:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
