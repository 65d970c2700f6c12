#!/usr/bin/env python
"""Compress a model with llmcompressor, then evaluate perplexity / zero-shot accuracy.

    .venv/bin/python scripts/compress.py --model smollm2-135m \
        --methods awq,awq_perp,wanda,owl,sgpt,sgpt_perp,rtn_w3g64 --ppl

Method names (``tlgeo.compression.methods``): a family -- ``awq``, ``rtn``, ``wanda``,
``sgpt`` (SparseGPT), ``owl`` (Wanda, OWL-style layer sparsities), ``perpalloc`` (Wanda,
layer sparsities from the perpendicular error) -- with options ``_perp`` (the
direction-aware objective), ``_l<lambda>``, ``_w<bits>g<group>``, ``_s<percent>``, ``_<N>_<M>``.
``perpalloc`` reads the per-layer sensitivity from ``--sensitivity-from`` (a
``diag_layers.csv`` of ``tlgeo compress-diag``) for the uniform Wanda model of the same
sparsity (``wanda_s<percent>``, ``--sensitivity-method`` to choose another).

Compressed models go to ``$TLGEO_CACHE/compressed/<model>/<method>`` (default
``~/.cache/tlgeo``), never into the repository; a method whose directory already
holds a manifest is not recompressed (``--force`` redoes it). Calibration: ``--n-calib``
windows of ``--calib-seq-len`` tokens of ``--calib-corpus`` (default the WikiText-2
validation split, disjoint from the WikiText-2 test text that perplexity reads).
Perplexity and zero-shot results are appended to JSON lines under ``--out`` and
skipped when already there.

On a CPU-only machine llmcompressor's activation cache tries to pin memory and
fails ("Cannot access accelerator device"); ``tlgeo.compression.llmc`` patches that
call to a no-op (only when no CUDA device is present). On a GPU machine pass
``--device cuda`` (one GPU) or ``--device auto`` (llmcompressor's sequential
pipeline onloads one decoder layer at a time to the accelerator, so several GPUs
are not needed even for larger models).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tlgeo.compression.llmc import MANIFEST, calibration_windows, compress_model, compressed_dir  # noqa: E402
from tlgeo.compression.methods import UnknownMethodError, parse_method  # noqa: E402


def base_dir(model: str) -> Path:
    from tlgeo.models import EMBEDDED_MODELS, embedded_model_dir

    if model in EMBEDDED_MODELS:
        return embedded_model_dir(model)
    p = Path(model).expanduser()
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"{model!r} is neither an embedded model nor a local HF model directory")
    return p


def model_key(model: str) -> str:
    return Path(model).name if Path(model).expanduser().is_dir() else model.replace(":", "-")


def sensitivity(args, spec) -> list[float]:
    """Per-layer local block e_perp of the uniform model of ``spec``'s sparsity."""
    import pandas as pd

    from tlgeo.compression.allocation import perp_sensitivity

    if not args.sensitivity_from:
        raise SystemExit(f"{spec.name}: pass --sensitivity-from DIAG_LAYERS_CSV (tlgeo compress-diag of the uniform model)")
    method = args.sensitivity_method or f"wanda_s{round(100 * spec.sparsity)}"
    layers = pd.read_csv(args.sensitivity_from)
    if method not in set(layers["method"]) and method == "wanda_s50":
        method = "wanda"  # the same model under its short name
    return perp_sensitivity(layers, method).tolist()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--methods", default="awq,wanda,wanda_4_8,wanda_2_4", help="comma list of method names")
    ap.add_argument("--n-calib", type=int, default=32)
    ap.add_argument("--calib-seq-len", type=int, default=128)
    ap.add_argument("--calib-corpus", default="wikitext2-valid")
    ap.add_argument("--group-size", type=int, default=64, help="AWQ group size (must divide every input width)")
    ap.add_argument("--awq-grid", type=int, default=20, help="AWQ scale-search grid points (llmcompressor default 20)")
    ap.add_argument("--perp-lambda", type=float, default=0.0,
                    help="weight of the parallel error in *_perp methods without _l<lambda> (1 = isotropic)")
    ap.add_argument("--sensitivity-from", default=None, help="diag_layers.csv whose local block e_perp drives perpalloc")
    ap.add_argument("--sensitivity-method", default=None, help="method of that table (default wanda_s<percent>)")
    ap.add_argument("--alloc-spread", type=float, default=0.08, help="OWL's lambda: layer sparsities within +-2x this")
    ap.add_argument("--owl-m", type=float, default=5.0, help="OWL's M: outliers are scores above M x the mean")
    ap.add_argument("--refit-iters", type=int, default=12,
                    help="CG iterations of the sgpt_perp refit (12 keeps it within 2x of SparseGPT here)")
    ap.add_argument("--max-iso-increase", type=float, default=0.0,
                    help="sgpt_perp: isotropic error at most (1 + this) x that of the unreconstructed mask")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    ap.add_argument("--pipeline", default="sequential", choices=["sequential", "basic"],
                    help="llmcompressor pipeline for the pruning methods (AWQ and RTN always use sequential)")
    ap.add_argument("--root", default=None, help="parent of <method>/ dirs (default $TLGEO_CACHE/compressed/<model>)")
    ap.add_argument("--force", action="store_true", help="recompress methods already present")
    ap.add_argument("--no-compress", action="store_true", help="only evaluate existing compressed models")
    ap.add_argument("--ppl", action="store_true", help="perplexity of the base and every method")
    ap.add_argument("--ppl-corpus", default="wikitext2")
    ap.add_argument("--ppl-tokens", type=int, default=2048)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--zeroshot-tasks", default="", help="e.g. piqa,arc_easy,winogrande (offline tasks)")
    ap.add_argument("--zeroshot-limit", type=int, default=200)
    ap.add_argument("--out", default=None, help="results directory (default results/compression/<model>)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    methods = [m for m in args.methods.split(",") if m]
    specs = {}
    for m in methods:
        try:
            specs[m] = parse_method(m, args.group_size, args.perp_lambda)
        except UnknownMethodError as e:
            ap.error(str(e))
    src = base_dir(args.model)
    key = model_key(args.model)
    root = Path(args.root) if args.root else compressed_dir(key, "x").parent
    out = Path(args.out or Path("results") / "compression" / key)
    out.mkdir(parents=True, exist_ok=True)

    if not args.no_compress:
        from transformers import AutoTokenizer

        calib = calibration_windows(AutoTokenizer.from_pretrained(src), args.calib_corpus, args.n_calib, args.calib_seq_len)
        for m in methods:
            target = root / m
            if (target / MANIFEST).is_file() and not args.force:
                print(f"[{m}] already compressed in {target}, skipping")
                continue
            sens = None
            if specs[m].family == "perpalloc":
                sens = sensitivity(args, specs[m])
            t0 = time.time()
            man = compress_model(src, specs[m], target, calib=calib, device=args.device,
                                 pipeline="sequential" if specs[m].quantizes else args.pipeline,
                                 awq_n_grid=args.awq_grid, sensitivity=sens, alloc_spread=args.alloc_spread,
                                 owl_m=args.owl_m, refit_iters=args.refit_iters, max_iso_increase=args.max_iso_increase,
                                 extra={"calib_corpus": args.calib_corpus})
            print(f"[{m}] {time.time() - t0:.0f} s -> {target}\n  checks: {json.dumps(man['checks'])}", flush=True)
            with (out / "compress_log.jsonl").open("a") as f:
                f.write(json.dumps(man) + "\n")

    if args.ppl or args.zeroshot_tasks:
        from tlgeo.data import load_text
        from tlgeo.models import load_model
        from tlgeo.evals.perplexity import perplexity
        from tlgeo.results import ResultLog
        from tlgeo.evals.zeroshot import evaluate_zeroshot

        text = load_text(args.ppl_corpus)
        plog = ResultLog(out / "ppl.jsonl", ("method", "corpus", "tokens", "context"))
        for m in ["base", *methods]:
            d = src if m == "base" else root / m
            if not (d / "config.json").is_file():
                print(f"[{m}] no compressed model at {d}; skipped")
                continue
            keyv = {"method": m, "corpus": args.ppl_corpus, "tokens": args.ppl_tokens, "context": args.context}
            need_ppl = args.ppl and not plog.done(**keyv)
            if not need_ppl and not args.zeroshot_tasks:
                continue
            bridge = load_model(str(d))
            if need_ppl:
                t0 = time.time()
                r = perplexity(bridge, text, context=args.context, max_tokens=args.ppl_tokens)
                plog.add({**keyv, **r.to_dict(), "seconds": time.time() - t0})
                print(f"[{m}] ppl {r.ppl:.3f}", flush=True)
            if args.zeroshot_tasks:
                zs = evaluate_zeroshot(bridge, args.zeroshot_tasks.split(","), limit=args.zeroshot_limit,
                                       log_path=out / "zeroshot.jsonl", tag=m)
                print(zs[["task", "n", "acc", "acc_norm"]].assign(method=m).to_string(index=False), flush=True)
            del bridge
        ppl = plog.frame()
        if len(ppl):
            ppl.to_csv(out / "ppl.csv", index=False)
        if args.zeroshot_tasks and (out / "zeroshot.jsonl").exists():
            zs = ResultLog(out / "zeroshot.jsonl", ("task", "limit", "tag")).frame().drop(columns=["items"])
            zs.rename(columns={"tag": "method"}).to_csv(out / "zeroshot.csv", index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
