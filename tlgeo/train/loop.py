"""The training loop: AdamW + warmup/cosine, gradient accumulation, DDP/FSDP,
validation loss to CSV, checkpoints with optimizer, scheduler, RNG and data position.

``train(cfg)`` returns the log as a tidy DataFrame (one row per step; ``val_loss``
on evaluation steps). ``train(cfg, resume=True)`` continues from
``<out>/checkpoint.pt`` with the identical loss trajectory: the batches are a
function of ``(seed, step)`` and every random state is restored.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import math
import pickle
import random
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from ..storage import append_lines, atomic_write, read_lines, write_csv
from . import parallel as D
from .config import ConfigError, TrainConfig
from .data import TokenStream, build_token_stream
from .model import build_bridge, export_hf, hf_names, load_tokenizer, special_ids
from .suppression import SuppressedLM, Suppression

__all__ = ["train", "lr_factor", "make_model", "LOG_COLUMNS"]

LOG_COLUMNS = ["step", "tokens", "train_loss", "val_loss", "lr", "grad_norm", "elapsed_s"]
_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


def lr_factor(step: int, cfg: TrainConfig) -> float:
    """Multiplier of ``cfg.lr`` at optimizer step ``step`` (0-based): linear warmup, cosine decay."""
    if cfg.warmup and step < cfg.warmup:
        return (step + 1) / cfg.warmup
    span = max(cfg.steps - cfg.warmup, 1)
    progress = min((step - cfg.warmup) / span, 1.0)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def make_model(cfg: TrainConfig, tokenizer=None) -> SuppressedLM:
    """The bridge of ``cfg.model`` (seeded init) with ``cfg.variant`` attached."""
    bridge = build_bridge(cfg.model, cfg.seed, tokenizer=tokenizer)
    sup = Suppression(
        cfg.variant, bridge.cfg, skip_first=cfg.skip_first, gate_site=cfg.gate_site, gate_bias_init=cfg.gate_bias_init
    )
    return SuppressedLM(bridge, sup)


# fields a resumed run may change: where it writes and how it logs, not what it computes
RUN_ONLY = (
    "out",
    "data_dir",
    "device",
    "threads",
    "dist",
    "tensorboard",
    "wandb",
    "eval_every",
    "eval_batches",
    "save_every",
)


def trajectory_differences(saved: dict, cfg: TrainConfig) -> list[str]:
    """``field: saved -> now`` for every setting that decides the training trajectory (all but :data:`RUN_ONLY`)
    where the checkpoint's config ``saved`` and ``cfg`` differ."""
    import json

    now = json.loads(json.dumps(cfg.to_dict()))
    then = json.loads(json.dumps(saved))
    return [f"{k}: {then.get(k)!r} -> {now[k]!r}" for k in now if k not in RUN_ONLY and then.get(k) != now[k]]


def _param_groups(lm: torch.nn.Module, wd: float):
    decay, no_decay = [], []
    for n, p in lm.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and "gate_" not in n else no_decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def _rng_state() -> dict:
    """Every generator's state as tensors and plain values (a checkpoint loads with ``weights_only=True``)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    s = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
    }
    if torch.cuda.is_available():
        s["cuda"] = torch.cuda.get_rng_state_all()
    return s


def _set_rng_state(s: dict) -> None:
    torch.set_rng_state(s["torch"])
    n = s["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    random.setstate(s["python"])
    if "cuda" in s and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(s["cuda"])


def _autocast(device: torch.device, dtype: str):
    if dtype == "auto":
        dtype = "bf16" if device.type == "cuda" else "fp32"
    if dtype in ("bf16", "bfloat16"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    if dtype in ("fp32", "float32"):
        return contextlib.nullcontext()
    raise ConfigError(f"dtype must be auto, bf16 or fp32, got {dtype!r}")


@torch.no_grad()
def _evaluate(model, batches, info: D.DistInfo, cfg: TrainConfig) -> float:
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=info.device)
    # FSDP ranks must run the same forwards (collective all-gathers): there every rank
    # evaluates every batch, and the all-reduced ratio is unchanged
    for b in batches if info.mode == "fsdp" else batches[info.rank :: info.world]:
        with _autocast(info.device, cfg.dtype):
            loss = model(b.to(info.device))
        total += torch.tensor([loss.item() * len(b), len(b)], dtype=torch.float64, device=info.device)
    if info.world > 1:
        torch.distributed.all_reduce(total)
    model.train()
    return float(total[0] / total[1])


def _rewrite_log(path: Path, upto: int) -> None:
    """Keep only rows with ``step <= upto`` (rows after the checkpoint are redone; a line torn by a kill goes)."""
    lines = read_lines(path)[0]
    if not lines:
        return
    df = pd.read_csv(io.StringIO("\n".join(lines)))
    write_csv(path, df[df["step"] <= upto])


def _tokenizer_setup(cfg: TrainConfig):
    """``(cfg, tokenizer, stream tokenizer, BOS id)``: with a real tokenizer the model's vocabulary is its own and
    every window starts with BOS, as every evaluation through the bridge (to_tokens prepends it) will."""
    tokenizer, stream_tokenizer, bos = load_tokenizer(cfg.tokenizer), None, None
    if cfg.tokenizer != "bytes":
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, vocab_size=len(tokenizer)))
        stream_tokenizer, bos = tokenizer, special_ids(tokenizer)[0]
    return cfg, tokenizer, stream_tokenizer, bos


def _per_rank(cfg: TrainConfig, info: D.DistInfo) -> int:
    """Sequences per rank and optimizer step; the batch must split evenly over ranks and micro-batches."""
    per_rank, rem = divmod(cfg.batch_size, info.world)
    if rem or per_rank % cfg.grad_accum:
        raise ConfigError(
            f"batch_size={cfg.batch_size} must be divisible by world size {info.world} x grad_accum {cfg.grad_accum}"
        )
    return per_rank


def _token_stream(cfg: TrainConfig, info: D.DistInfo, out: Path, stream_tokenizer, bos) -> TokenStream:
    """The run's token stream, built by rank 0 first (it makes ``out`` and the data), then by the others."""

    def build():
        return build_token_stream(
            cfg.data, cfg.data_dir, val_frac=cfg.val_frac, max_tokens=cfg.max_data_tokens, tokenizer=stream_tokenizer
        )

    if info.main:
        out.mkdir(parents=True, exist_ok=True)
        data_dir = build()
    D.barrier(info)
    if not info.main:
        data_dir = build()
    stream = TokenStream(data_dir, cfg.seq_len, cfg.seed, bos=bos)
    if stream.vocab_size > cfg.model.vocab_size:
        raise ConfigError(
            f"the data's vocabulary ({stream.vocab_size}) exceeds the model's vocab_size ({cfg.model.vocab_size})"
        )
    return stream


def _resume(ckpt_path: Path, log_path: Path, cfg: TrainConfig, model, opt, sched, info: D.DistInfo, log):
    """Load the checkpoint into model, optimizer, scheduler and RNGs; cut the log back to it.
    Returns ``(step, elapsed seconds)``; a foreign or mismatched checkpoint is a ``ConfigError``."""
    try:  # tensors and plain values only: a checkpoint from elsewhere cannot run code here
        ck = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0]
        raise ConfigError(
            f"{ckpt_path} is not a checkpoint of this tlgeo (it holds more than tensors and plain "
            f"values: {first}); move it away to train from the start"
        ) from None
    differ = trajectory_differences(ck["config"], cfg)
    if differ:
        raise ConfigError(
            f"{ckpt_path} was written for another run ({'; '.join(differ)}): resuming it would not "
            f"give this run's model; move it away to train from the start"
        )
    set_model_state_dict(model, ck["model"], options=_FULL)
    set_optimizer_state_dict(model, opt, ck["optimizer"], options=_FULL)
    sched.load_state_dict(ck["scheduler"])
    _set_rng_state(ck["rng"][info.rank] if info.rank < len(ck["rng"]) else ck["rng"][0])
    start, elapsed0 = ck["step"], ck.get("elapsed_s", 0.0)
    if info.main:
        _rewrite_log(log_path, start)
    log(f"resumed from step {start}")
    return start, elapsed0


def _save_checkpoint(
    ckpt_path: Path, model, opt, sched, cfg: TrainConfig, info: D.DistInfo, step: int, elapsed: float
) -> None:
    """Write ``checkpoint.pt`` (rank 0; every rank's RNG state gathered into it), then wait for every rank."""
    msd = get_model_state_dict(model, options=_FULL)
    osd = get_optimizer_state_dict(model, opt, options=_FULL)
    rngs = [None] * info.world
    if info.world > 1:
        torch.distributed.all_gather_object(rngs, _rng_state())
    else:
        rngs = [_rng_state()]
    if info.main:
        with atomic_write(ckpt_path, "wb") as f:
            torch.save(
                {
                    "model": msd,
                    "optimizer": osd,
                    "scheduler": sched.state_dict(),
                    "rng": rngs,
                    "step": step,
                    "data_position": {"step": step, "seed": cfg.seed},
                    "elapsed_s": elapsed,
                    "config": cfg.to_dict(),
                },
                f,
            )
    D.barrier(info)


def _step_loss(model, batch: torch.Tensor, micro: int, cfg: TrainConfig, info: D.DistInfo) -> torch.Tensor:
    """Forward and backward over the batch's micro-batches (DDP syncs gradients on the last only); the loss sum."""
    loss_sum = torch.zeros((), device=info.device)
    for i, mb in enumerate(batch.split(micro)):
        sync = contextlib.nullcontext()
        if info.world > 1 and info.mode == "ddp" and i < cfg.grad_accum - 1:
            sync = model.no_sync()
        with sync:
            with _autocast(info.device, cfg.dtype):
                loss = model(mb) / cfg.grad_accum
            loss.backward()
        loss_sum += loss.detach()
    return loss_sum


def _optimizer_step(model, opt, sched, cfg: TrainConfig) -> tuple[float, float]:
    """Clip, step the optimizer and the schedule, clear the gradients: ``(grad norm, lr used)``."""
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
    if hasattr(gnorm, "full_tensor"):  # FSDP2: a DTensor
        gnorm = gnorm.full_tensor()
    lr = sched.get_last_lr()[0]
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return gnorm, lr


def _append_log_row(log_path: Path, row: dict) -> None:
    """Append one step's row to ``log.csv`` (the header first when the file is new or empty)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=LOG_COLUMNS, lineterminator="\n")
    if not log_path.exists() or not log_path.stat().st_size:
        w.writeheader()
    w.writerow(row)
    append_lines(log_path, buf.getvalue().splitlines())


def _export(model, lm: SuppressedLM, names, cfg: TrainConfig, out: Path, tokenizer, bos, info: D.DistInfo) -> None:
    """Export the trained model (and its learned gate, if any) as a Hugging Face folder ``out/model`` (rank 0)."""
    msd = get_model_state_dict(model, options=_FULL)
    if info.main:
        gate = {k.split("suppression.", 1)[1]: v for k, v in msd.items() if k.startswith("suppression.")}
        export_hf(
            msd,
            names,
            cfg.model,
            out / "model",
            lm.suppression.describe(),
            gate or None,
            tokenizer=tokenizer,
            prepend_bos=bos is not None,
        )
    D.barrier(info)


def train(
    cfg: TrainConfig, *, resume: bool = False, stop_after: int | None = None, log=print, on_end=None
) -> pd.DataFrame:
    """Train ``cfg`` to ``cfg.steps`` (or stop after ``stop_after`` steps of this call,
    saving a checkpoint, to simulate an interruption). Returns the step log.

    ``on_end(model, info)`` is called on every rank before the process group is
    torn down (tests use it to compare ranks)."""
    cfg.validate()
    cfg, tokenizer, stream_tokenizer, bos = _tokenizer_setup(cfg)
    lm = make_model(cfg, tokenizer)
    info = D.setup(cfg.dist, cfg.device)
    if info.device.type == "cpu" and cfg.threads:
        torch.set_num_threads(cfg.threads)
    per_rank = _per_rank(cfg, info)
    out = Path(cfg.out)
    ckpt_path, log_path = out / "checkpoint.pt", out / "log.csv"
    stream = _token_stream(cfg, info, out, stream_tokenizer, bos)
    val = stream.val_batches(cfg.eval_batches, max(per_rank // cfg.grad_accum, 1))

    lm = lm.to(info.device)
    names = hf_names(lm, lm.bridge)
    model = D.wrap(lm, info, list(lm.bridge.blocks))
    opt = torch.optim.AdamW(_param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=cfg.betas)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))

    start, elapsed0 = 0, 0.0
    if resume and ckpt_path.exists():
        start, elapsed0 = _resume(ckpt_path, log_path, cfg, model, opt, sched, info, log)
    elif info.main and log_path.exists():
        log_path.unlink()
    if info.main:
        cfg.save(out / "config.json")

    micro = per_rank // cfg.grad_accum
    t0 = time.perf_counter() - elapsed0
    rows = []
    end = cfg.steps if stop_after is None else min(cfg.steps, start + stop_after)
    model.train()
    for step in range(start, end):
        batch = stream.batch(step, cfg.batch_size, info.rank, info.world).to(info.device)
        loss_sum = _step_loss(model, batch, micro, cfg, info)
        gnorm, lr = _optimizer_step(model, opt, sched, cfg)
        train_loss = float(D.all_mean(loss_sum, info))
        if not math.isfinite(train_loss):
            raise FloatingPointError(f"non-finite training loss at step {step + 1}")
        n = step + 1
        row = {
            "step": n,
            "tokens": n * cfg.batch_size * cfg.seq_len,
            "train_loss": train_loss,
            "val_loss": float("nan"),
            "lr": lr,
            "grad_norm": float(gnorm),
            "elapsed_s": time.perf_counter() - t0,
        }
        if n % cfg.eval_every == 0 or n == cfg.steps:
            row["val_loss"] = _evaluate(model, val, info, cfg)
            log(f"step {n}/{cfg.steps} train {train_loss:.4f} val {row['val_loss']:.4f} ({row['elapsed_s']:.0f}s)")
        rows.append(row)
        if info.main:
            _append_log_row(log_path, row)
        if (cfg.save_every and n % cfg.save_every == 0) or n == end:
            _save_checkpoint(ckpt_path, model, opt, sched, cfg, info, n, row["elapsed_s"])
        _external_log(cfg, row, info)

    if end == cfg.steps:
        _export(model, lm, names, cfg, out, tokenizer, bos, info)
    if on_end is not None:
        on_end(model, info)
    D.cleanup(info)
    return pd.read_csv(log_path) if info.main and log_path.exists() else pd.DataFrame(rows)


_WRITERS: dict = {}


def _external_log(cfg: TrainConfig, row: dict, info: D.DistInfo) -> None:
    """TensorBoard / W&B, only when asked for (rank 0)."""
    if not info.main or not (cfg.tensorboard or cfg.wandb):
        return
    if cfg.tensorboard:
        if "tb" not in _WRITERS:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ConfigError("--tensorboard needs the tensorboard package") from e
            _WRITERS["tb"] = SummaryWriter(str(Path(cfg.out) / "tb"))
        for k in ("train_loss", "val_loss", "lr", "grad_norm"):
            if not math.isnan(row[k]):
                _WRITERS["tb"].add_scalar(k, row[k], row["step"])
    if cfg.wandb:
        import wandb

        if "wandb" not in _WRITERS:
            _WRITERS["wandb"] = wandb.init(project=cfg.wandb, config=cfg.to_dict(), dir=cfg.out)
        wandb.log({k: v for k, v in row.items() if not (isinstance(v, float) and math.isnan(v))}, step=row["step"])
