"""Command line of the pretraining run (``scripts/pretrain.py``, ``tlgeo train``)."""

from __future__ import annotations

import argparse

from .config import ARCHS, VARIANTS, ModelSpec, TrainConfig

__all__ = ["add_train_args", "config_from_args", "main"]


def add_train_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    d, m = TrainConfig(), ModelSpec()
    g = p.add_argument_group("model")
    g.add_argument("--arch", choices=ARCHS, default=m.arch, help="gpt: LayerNorm/GELU/RoPE; llama: RMSNorm/SwiGLU/GQA")
    g.add_argument("--d-model", type=int, default=m.d_model)
    g.add_argument("--layers", type=int, default=m.n_layers)
    g.add_argument("--heads", type=int, default=m.n_heads)
    g.add_argument("--kv-heads", type=int, default=None, help="GQA key/value heads (default: --heads)")
    g.add_argument("--d-mlp", type=int, default=None)
    g.add_argument("--context", type=int, default=m.context)
    g = p.add_argument_group("suppression")
    g.add_argument("--variant", choices=VARIANTS, default=d.variant)
    g.add_argument("--skip-first", type=int, default=d.skip_first)
    g.add_argument("--gate-site", default=d.gate_site)
    g.add_argument("--gate-bias-init", type=float, default=d.gate_bias_init)
    g = p.add_argument_group("data")
    g.add_argument("--data", default=d.data, help="comma-separated corpora / text files / hf:<dataset>[:<config>[:<split>]]")
    g.add_argument("--data-dir", default=d.data_dir)
    g.add_argument("--val-frac", type=float, default=d.val_frac)
    g.add_argument("--max-data-tokens", type=int, default=None, help="cap per source")
    g = p.add_argument_group("optimisation")
    for name in ("seq_len", "batch_size", "grad_accum", "steps", "warmup", "eval_every",
                 "eval_batches", "save_every", "seed", "threads"):
        g.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    for name in ("lr", "min_lr_ratio", "weight_decay", "clip"):
        g.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(d, name))
    g.add_argument("--device", default=d.device)
    g.add_argument("--dtype", default=d.dtype, help="auto (bf16 autocast on GPU), bf16, fp32")
    g.add_argument("--dist", choices=("none", "ddp", "fsdp"), default=d.dist)
    g = p.add_argument_group("output")
    g.add_argument("--out", default=d.out)
    g.add_argument("--resume", action="store_true", help="continue from <out>/checkpoint.pt")
    g.add_argument("--tensorboard", action="store_true")
    g.add_argument("--wandb", default=None, metavar="PROJECT")
    return p


def config_from_args(a: argparse.Namespace) -> TrainConfig:
    spec = ModelSpec(arch=a.arch, d_model=a.d_model, n_layers=a.layers, n_heads=a.heads,
                     n_kv_heads=a.kv_heads, d_mlp=a.d_mlp, context=a.context)
    keys = ("variant", "skip_first", "gate_site", "gate_bias_init", "data", "data_dir", "val_frac",
            "max_data_tokens", "seq_len", "batch_size", "grad_accum", "steps", "warmup", "eval_every",
            "eval_batches", "save_every", "seed", "threads", "lr", "min_lr_ratio", "weight_decay",
            "clip", "device", "dtype", "dist", "out", "tensorboard", "wandb")
    return TrainConfig(model=spec, **{k: getattr(a, k) for k in keys})


def run(a: argparse.Namespace) -> int:
    from .loop import train

    cfg = config_from_args(a)
    df = train(cfg, resume=a.resume)
    last = df.dropna(subset=["val_loss"]).tail(1)
    if len(last):
        print(f"final val loss {float(last.val_loss.iloc[0]):.4f} at step {int(last.step.iloc[0])}; "
              f"model in {cfg.out}/model")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = add_train_args(argparse.ArgumentParser(
        description="Pretrain a causal LM from scratch with parallel suppression (torchrun-ready)"))
    return run(p.parse_args(argv))
