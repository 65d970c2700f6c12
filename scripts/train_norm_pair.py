#!/usr/bin/env python
"""Train the matched LayerNorm / RMSNorm pair for the direction-vs-magnitude analysis.

    python scripts/train_norm_pair.py                 # ~55 min on 2 CPU cores
    python scripts/train_norm_pair.py --steps 20      # a smoke run
    python scripts/train_norm_pair.py --d-model 128 --archs llama \
        --checkpoints checkpoints/norm_pair_d128 --out runs/norm_pair_d128   # another width

Two models that differ only in their architecture family: ``gpt`` (biased
LayerNorm, GELU MLP) and ``llama`` (RMSNorm, SwiGLU MLP), with the same width,
depth, heads, context, data (Austen + Moby Dick + the Bible), SmolLM2's BPE
tokenizer, optimiser, steps and seed. Checkpoints go to ``--checkpoints``
(a rerun resumes an interrupted run); the tables that RESULTS.md quotes go to
``--out``: ``summary.csv`` (parameters, tokens, final validation loss, clean
BLiMP agreement accuracy, time), ``blimp.csv`` (per paradigm, with CIs) and
``<arch>_log.csv`` (the training curves).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

import pandas as pd  # noqa: E402

from tlgeo.train import ModelSpec, TrainConfig, train  # noqa: E402

ARCHS = ("gpt", "llama")


def pair_configs(a: argparse.Namespace) -> list[TrainConfig]:
    return [
        TrainConfig(
            model=ModelSpec(arch=arch, d_model=a.d_model, n_layers=a.layers, n_heads=a.heads, context=a.seq_len),
            tokenizer=a.tokenizer,
            data=a.data,
            data_dir=str(Path(a.checkpoints) / "data"),
            seq_len=a.seq_len,
            batch_size=a.batch_size,
            steps=a.steps,
            lr=a.lr,
            warmup=min(a.warmup, a.steps),
            eval_every=max(a.steps // 7, 1),
            eval_batches=16,
            save_every=max(a.steps // 7, 1),
            seed=a.seed,
            threads=a.threads,
            out=str(Path(a.checkpoints) / arch),
        )
        for arch in a.archs
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=1400)
    p.add_argument("--lr", type=float, default=1.5e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--tokenizer", default="smollm2-135m")
    p.add_argument("--data", default="austen,mobydick,bible")
    p.add_argument("--blimp-limit", type=int, default=500, help="pairs per BLiMP paradigm")
    p.add_argument(
        "--archs", type=lambda v: tuple(x for x in v.split(",") if x), default=ARCHS, help="which of gpt,llama to train"
    )
    p.add_argument("--checkpoints", default="checkpoints/norm_pair")
    p.add_argument(
        "--out", default="runs/norm_pair", help="results folder (the committed copy: --out results/norm_pair)"
    )
    a = p.parse_args(argv)
    if not a.archs or any(x not in ARCHS for x in a.archs):
        p.error(f"--archs must name some of {','.join(ARCHS)}, got {','.join(a.archs) or '(none)'}")

    from tlgeo.evals.blimp import evaluate_blimp
    from tlgeo.train import load_trained

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    summary, blimp = [], []
    for cfg in pair_configs(a):
        arch = cfg.model.arch
        t0, c0 = time.perf_counter(), time.process_time()
        log = train(cfg, resume=True)
        log.to_csv(out / f"{arch}_log.csv", index=False)
        model, _ = load_trained(Path(cfg.out) / "model")
        acc = evaluate_blimp(model, limit=a.blimp_limit)
        acc.insert(0, "arch", arch)
        blimp.append(acc)
        last = log.dropna(subset=["val_loss"]).iloc[-1]
        pooled = acc[acc.paradigm == "pooled"].iloc[0]
        summary.append(
            {
                "arch": arch,
                "norm": "LayerNorm" if arch == "gpt" else "RMSNorm",
                "params": sum(q.numel() for q in model.parameters()),
                "d_model": cfg.model.d_model,
                "layers": cfg.model.n_layers,
                "steps": cfg.steps,
                "tokens": int(last.tokens),
                "val_loss": float(last.val_loss),
                "blimp_pooled": float(pooled.accuracy),
                "blimp_ci_low": float(pooled.ci_low),
                "blimp_ci_high": float(pooled.ci_high),
                "train_s": float(log.elapsed_s.iloc[-1]),
                "wall_s": time.perf_counter() - t0,
                "cpu_s": time.process_time() - c0,  # all threads: 2 x wall on a dedicated 2-core machine
                "model_dir": str(Path(cfg.out) / "model"),
            }
        )
        print(
            f"{arch}: val loss {last.val_loss:.3f}, BLiMP pooled {pooled.accuracy:.1f}% "
            f"({pooled.ci_low:.1f}-{pooled.ci_high:.1f}), {log.elapsed_s.iloc[-1] / 60:.1f} min",
            flush=True,
        )
        shutil.copy(Path(cfg.out) / "config.json", out / f"{arch}_config.json")
    pd.DataFrame(summary).to_csv(out / "summary.csv", index=False)
    pd.concat(blimp).to_csv(out / "blimp.csv", index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
