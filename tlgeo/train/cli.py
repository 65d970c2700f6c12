"""Command line of the pretraining run (``scripts/pretrain.py``, ``tlgeo train``)."""

from __future__ import annotations

import argparse

from .config import ARCHS, VARIANTS, ModelSpec, TrainConfig

__all__ = ["add_train_args", "config_from_args", "main", "warmup_for"]

_OPTIMISATION = (
    ("seq_len", int, "tokens per training sequence"),
    ("batch_size", int, "sequences per step and rank"),
    ("grad_accum", int, "micro-batches accumulated per optimizer step"),
    ("steps", int, "optimizer steps"),
    ("warmup", int, "linear warm-up steps before the cosine decay (default: 20, at most a tenth of --steps)"),
    ("eval_every", int, "steps between validation losses"),
    ("eval_batches", int, "batches per validation loss"),
    ("save_every", int, "steps between checkpoints"),
    ("seed", int, "seed of the initialisation and the data order"),
    ("threads", int, "torch CPU threads (0: torch's own choice)"),
    ("lr", float, "peak learning rate (AdamW)"),
    ("min_lr_ratio", float, "final learning rate as a fraction of the peak"),
    ("weight_decay", float, "AdamW weight decay"),
    ("clip", float, "gradient-norm clip"),
)


def add_train_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    d, m = TrainConfig(), ModelSpec()
    g = p.add_argument_group("model")
    g.add_argument("--arch", choices=ARCHS, default=m.arch, help="gpt: LayerNorm/GELU/RoPE; llama: RMSNorm/SwiGLU/GQA")
    g.add_argument("--d-model", type=int, default=m.d_model, help="residual width")
    g.add_argument("--layers", type=int, default=m.n_layers, help="blocks")
    g.add_argument("--heads", type=int, default=m.n_heads, help="query heads per block")
    g.add_argument("--kv-heads", type=int, default=None, help="GQA key/value heads (default: --heads)")
    g.add_argument("--d-mlp", type=int, default=None, help="MLP width (default: 4 d_model for gpt, the Llama ratio for llama)")
    g.add_argument("--context", type=int, default=m.context, help="the model's maximum positions")
    g = p.add_argument_group("suppression")
    g.add_argument("--variant", choices=VARIANTS, default=d.variant,
                   help="what is suppressed: none, the parallel part at a site, or a learned gate")
    g.add_argument("--skip-first", type=int, default=d.skip_first, help="suppress in blocks skip_first.. (0: every block)")
    g.add_argument("--gate-site", default=d.gate_site, help="site of the learned gate (--variant gate)")
    g.add_argument("--gate-bias-init", type=float, default=d.gate_bias_init,
                   help="initial gate bias (sigmoid(0) = 0.5: half the parallel part removed)")
    g = p.add_argument_group("data")
    g.add_argument("--data", default=d.data, help="comma-separated corpora / text files / hf:<dataset>[:<config>[:<split>]]")
    g.add_argument("--tokenizer", default=d.tokenizer,
                   help="bytes, or a model whose tokenizer to train with (smollm2-135m, an HF directory); "
                        "the vocabulary follows it")
    g.add_argument("--data-dir", default=d.data_dir, help="token stream cache (memory-mapped)")
    g.add_argument("--val-frac", type=float, default=d.val_frac, help="share of the tokens held out for validation")
    g.add_argument("--max-data-tokens", type=int, default=None, help="cap per source")
    g = p.add_argument_group("optimisation")
    for name, kind, text in _OPTIMISATION:  # --warmup: None (derived from --steps, warmup_for)
        g.add_argument("--" + name.replace("_", "-"), type=kind, default=None if name == "warmup" else getattr(d, name),
                       help=text)
    g.add_argument("--device", default=d.device, help="cpu, cuda, cuda:1, ...")
    g.add_argument("--dtype", default=d.dtype, help="auto (bf16 autocast on GPU), bf16, fp32")
    g.add_argument("--dist", choices=("none", "ddp", "fsdp"), default=d.dist, help="data parallelism under torchrun")
    g = p.add_argument_group("output")
    g.add_argument("--out", default=d.out, help="run directory: log.csv, checkpoint.pt, model/")
    g.add_argument("--resume", action="store_true", help="continue from <out>/checkpoint.pt")
    g.add_argument("--tensorboard", action="store_true", help="also log to TensorBoard in <out>/tb")
    g.add_argument("--wandb", default=None, metavar="PROJECT", help="also log to this Weights & Biases project")
    return p


def config_from_args(a: argparse.Namespace) -> TrainConfig:
    spec = ModelSpec(arch=a.arch, d_model=a.d_model, n_layers=a.layers, n_heads=a.heads,
                     n_kv_heads=a.kv_heads, d_mlp=a.d_mlp, context=a.context)
    keys = ("variant", "skip_first", "gate_site", "gate_bias_init", "data", "tokenizer", "data_dir", "val_frac",
            "max_data_tokens", "seq_len", "batch_size", "grad_accum", "steps", "warmup", "eval_every",
            "eval_batches", "save_every", "seed", "threads", "lr", "min_lr_ratio", "weight_decay",
            "clip", "device", "dtype", "dist", "out", "tensorboard", "wandb")
    values = {k: getattr(a, k) for k in keys}
    if values["warmup"] is None:
        values["warmup"] = warmup_for(values["steps"])
    return TrainConfig(model=spec, **values)


def warmup_for(steps: int) -> int:
    """The default warm-up of a run of ``steps`` steps: 20 (the config's), at most a tenth of the run."""
    return min(TrainConfig.warmup, max(0, int(steps) // 10))


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


def _run_command(args: argparse.Namespace) -> int:
    args.record.out = args.out
    args.record.rerun = "Rerun it with --resume to continue from the last checkpoint."
    return run(args)


def _commands():
    from ..analysis import Command

    return (Command("train", "pretrain a model from scratch with parallel suppression", add_train_args,
                    _run_command, "Pretrain a causal LM from scratch with parallel suppression (torchrun-ready)"),)


COMMANDS = _commands()
