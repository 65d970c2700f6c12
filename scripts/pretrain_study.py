#!/usr/bin/env python
"""CPU-scale study (the paper's Figure 5 in small): baseline vs value-space removal vs
residual-attention removal vs learnable gate, for the LayerNorm GPT and the RMSNorm/GQA
Llama, several seeds, one token budget.

    nice -n 10 python scripts/pretrain_study.py --workers 2 --worker 0 &   # run shard 0
    nice -n 10 python scripts/pretrain_study.py --workers 2 --worker 1 &   # run shard 1
    python scripts/pretrain_study.py --report                            # table + figure

Every run resumes (checkpoints under --ckpt); finished runs are skipped. The report
writes ``--results`` (default ``runs/pretrain-study``, untracked; the committed study in
``results/pretrain-study`` is 24 ``tlgeo train`` runs, RESULTS.md section 1):
``{curves.csv,final.csv,summary.csv,curves.png}``, and
copies the two seed-0 baselines to ``checkpoints/tiny-gpt-layernorm`` and
``checkpoints/tiny-llama-rmsnorm`` (ordinary HF directories for ``tlgeo.load_model``).
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
import torch  # noqa: E402

from tlgeo.train import ModelSpec, TrainConfig, train  # noqa: E402

VARIANTS = ("none", "value_full", "attn", "gate")
ARCHS = {
    "gpt": dict(arch="gpt", d_model=128, n_layers=4, n_heads=4, context=128),
    "llama": dict(arch="llama", d_model=128, n_layers=4, n_heads=4, n_kv_heads=2, context=128),
}
TINY_NAMES = {"gpt": "tiny-gpt-layernorm", "llama": "tiny-llama-rmsnorm"}


def run_configs(a) -> list[TrainConfig]:
    out = []
    for seed in range(a.seeds):
        for arch in a.archs.split(","):
            for v in a.variants.split(","):
                out.append(
                    TrainConfig(
                        model=ModelSpec(**ARCHS[arch]),
                        variant=v,
                        data=a.data,
                        data_dir=str(Path(a.ckpt) / "data"),
                        seq_len=a.seq_len,
                        batch_size=a.batch_size,
                        steps=a.steps,
                        warmup=a.warmup,
                        lr=a.lr,
                        eval_every=a.eval_every,
                        eval_batches=a.eval_batches,
                        save_every=a.save_every,
                        seed=seed,
                        threads=a.threads,
                        out=str(Path(a.ckpt) / f"{arch}_{v}_s{seed}"),
                    )
                )
    return out


def is_done(cfg: TrainConfig) -> bool:
    return (Path(cfg.out) / "model" / "config.json").exists()


def report(a) -> None:
    res = Path(a.results)
    res.mkdir(parents=True, exist_ok=True)
    frames = []
    for cfg in run_configs(a):
        log = Path(cfg.out) / "log.csv"
        if not log.exists():
            continue
        df = pd.read_csv(log)
        df.insert(0, "arch", cfg.model.arch)
        df.insert(1, "variant", cfg.variant)
        df.insert(2, "seed", cfg.seed)
        df["done"] = is_done(cfg)
        frames.append(df)
    if not frames:
        sys.exit("no run logs yet")
    curves = pd.concat(frames, ignore_index=True)
    curves.dropna(subset=["val_loss"]).to_csv(res / "curves.csv", index=False)
    done = curves[curves.done]
    final = (
        done.sort_values("step")
        .groupby(["arch", "variant", "seed"])
        .tail(1)[["arch", "variant", "seed", "step", "tokens", "train_loss", "val_loss", "elapsed_s"]]
    )
    final.to_csv(res / "final.csv", index=False)
    summ = (
        final.groupby(["arch", "variant"])
        .agg(
            seeds=("seed", "count"),
            tokens=("tokens", "first"),
            val_loss_mean=("val_loss", "mean"),
            val_loss_sd=("val_loss", "std"),
            val_loss_min=("val_loss", "min"),
            val_loss_max=("val_loss", "max"),
            train_s_mean=("elapsed_s", "mean"),
        )
        .reset_index()
    )
    base = summ[summ.variant == "none"].set_index("arch").val_loss_mean
    summ["delta_vs_baseline"] = summ.val_loss_mean - summ.arch.map(base)
    order = {v: i for i, v in enumerate(VARIANTS)}
    summ = summ.sort_values(["arch", "variant"], key=lambda s: s.map(order) if s.name == "variant" else s)
    summ.to_csv(res / "summary.csv", index=False)
    print(summ.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    _plot(curves[curves.done].dropna(subset=["val_loss"]), res / "curves.png")  # finished runs only
    for arch, name in TINY_NAMES.items():
        src = Path(a.ckpt) / f"{arch}_none_s0" / "model"
        dst = Path(a.ckpt).parent / name
        if src.exists() and not dst.exists():
            shutil.copytree(src, dst)
            print(f"saved {dst}")


def _plot(curves: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    archs = sorted(curves.arch.unique())
    fig, axes = plt.subplots(1, len(archs), figsize=(6 * len(archs), 4), squeeze=False)
    for ax, arch in zip(axes[0], archs):
        for v in VARIANTS:
            d = curves[(curves.arch == arch) & (curves.variant == v)]
            if d.empty:
                continue
            g = d.groupby("tokens").val_loss.agg(["mean", "min", "max"]).reset_index()
            ax.plot(g.tokens / 1e3, g["mean"], label=f"{v} ({d.seed.nunique()} seeds)")
            ax.fill_between(g.tokens / 1e3, g["min"], g["max"], alpha=0.2)
        ax.set_title({"gpt": "GPT (LayerNorm, GELU, RoPE)", "llama": "Llama (RMSNorm, SwiGLU, GQA)"}.get(arch, arch))
        ax.set_xlabel("training tokens (thousands)")
        ax.set_ylabel("validation loss (nats/byte)")
        lo = g["mean"].min() if not g.empty else None
        if lo is not None:
            ax.set_ylim(lo - 0.1, lo + 1.0)
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--archs", default="gpt,llama")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--data", default="austen,mobydick,bible")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ckpt", default="checkpoints/pretrain-study")
    p.add_argument(
        "--results",
        default="runs/pretrain-study",
        help="where the report writes",
    )
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--worker", type=int, default=0)
    p.add_argument("--report", action="store_true", help="only aggregate finished runs")
    a = p.parse_args(argv)
    if a.report:
        report(a)
        return 0
    torch.set_num_threads(a.threads)
    cfgs = run_configs(a)[a.worker :: a.workers]
    t0 = time.time()
    for i, cfg in enumerate(cfgs):
        if is_done(cfg):
            continue
        print(f"[worker {a.worker}] {i + 1}/{len(cfgs)} {Path(cfg.out).name} ({time.time() - t0:.0f}s)", flush=True)
        train(cfg, resume=True, log=lambda m: print("   ", m, flush=True))
    print(f"[worker {a.worker}] done in {time.time() - t0:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
