"""The zoo: small models trained by :func:`~tlgeo.train.train` on algorithmic data, with mechanisms whose
answer is known, to validate patching and the decomposition on (spec: Olsson et al. 2022).

A zoo model is a :class:`TrainConfig` under a name (:data:`ZOO`). :func:`train_zoo_model` trains it and
exports the HF directory to ``<root>/<name>`` with ``zoo.json``: the command that retrains it, the
SHA-256 of its weights, its final validation loss and the heads its attention scores name
(:func:`planted_heads`). The repository keeps the exported models in ``zoo/``.

* ``induction-gpt`` / ``induction-llama``: 2 blocks of 4 heads (LayerNorm / RMSNorm) trained on random
  byte halves repeated (``repeat:8-24``): the second half is predictable only by copying, which a
  previous-token head in block 0 and an induction head in block 1 do together (K-composition). The learning
  rates differ: at 3e-3 the LayerNorm model (6,000 steps, seed 0) learned the task without a previous-token or an
  induction head (its block-0 heads attend a fixed 11-13 tokens back), at 1e-3 with both.
* ``predecessor-llama``: the same Llama on ``predecessor:4-12`` (random distinct bytes, then queries each after a
  separator and followed by the byte before it; 12,000 steps at 1e-3): the answer is what a previous-token head
  wrote at the query's earlier occurrence, read by a duplicate-token head through its value (V-composition). On
  ``predecessor:8-24`` at 3e-3 and 6,000 steps it learned neither head.
* ``lookback-llama``: the same Llama on ``predecessor:4-12`` and ``lookback:4-12`` together (the predecessor queries,
  and the same answered after a filler: ``r_1..r_L SEP r_j FILL`` -> ``r_(j-1)``; 12,000 steps at 1e-3, one
  thread). At the filler a block-1 head must query with ``r_j``, which only a block-0 head can have written there:
  Q-composition, with V-composition for the answer. Previous-token heads L0H0-1 (scores 0.81, 0.86), heads L1H0, 2, 3
  attending from the filler to the earlier ``r_j`` (0.80, 0.67, 0.69); final validation loss 3.03, the answer top-1
  at the filler on 256 ``lookback`` prompts 0.996. The previous-token heads reach the queries through block 0's MLP
  (path patching: 1.07 of the metric through the queries with the MLPs in the path, 0.02 without). On
  ``lookback:4-12`` alone, at 1e-3 and at 3e-3 for 12,000 steps, it learned no previous-token head (top-1 at the
  filler 0.09 at either).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import InputError
from ..storage import seal, write_json
from .config import ModelSpec, TrainConfig

__all__ = [
    "ZooModel",
    "ZOO",
    "ZOO_DIR",
    "zoo_model_dir",
    "repeated_batch",
    "predecessor_batch",
    "lookback_batch",
    "head_scores",
    "planted_heads",
    "train_zoo_model",
    "weights_digest",
    "SCORE_THRESHOLD",
]

ZOO_DIR = Path(__file__).resolve().parents[2] / "zoo"  # the repository's exported zoo models
SCORE_THRESHOLD = 0.4  # a head whose mean attention to its pattern's key is above this does that job


@dataclass(frozen=True)
class ZooModel:
    """A zoo model: its training configuration, what it is trained to do, and the data its duplicate-token score
    is measured on (``repeat``: a random half repeated; ``predecessor``: the ``predecessor:`` format, from a
    query after the separator to its earlier occurrence)."""

    name: str
    config: TrainConfig
    mechanism: str
    duplicates: str = "repeat"


def _zoo_config(name: str, arch: str, data: str, lr: float, steps: int = 6000, threads: int = 2) -> TrainConfig:
    return TrainConfig(
        model=ModelSpec(arch=arch, d_model=64, n_layers=2, n_heads=4, context=64),
        data=data,
        max_data_tokens=400_000,
        seq_len=64,
        batch_size=32,
        steps=steps,
        lr=lr,
        eval_every=500,
        eval_batches=8,
        seed=0,
        threads=threads,
        data_dir="checkpoints/zoo/data",
        out=f"checkpoints/zoo/{name}",
    )


ZOO: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel(
            "induction-gpt",
            _zoo_config("induction-gpt", "gpt", "repeat:8-24", 1e-3),
            "a previous-token head (block 0) and an induction head (block 1) copy the repeated half",
        ),
        ZooModel(
            "induction-llama",
            _zoo_config("induction-llama", "llama", "repeat:8-24", 3e-3),
            "a previous-token head (block 0) and an induction head (block 1) copy the repeated half",
        ),
        ZooModel(
            "predecessor-llama",
            _zoo_config("predecessor-llama", "llama", "predecessor:4-12", 1e-3, 12000),
            "a previous-token head (block 0) and a duplicate-token head (block 1) answer a token with the one "
            "before its earlier occurrence (V-composition)",
            duplicates="predecessor",
        ),
        ZooModel(
            "lookback-llama",
            _zoo_config("lookback-llama", "llama", "predecessor:4-12,lookback:4-12", 1e-3, 12000, threads=1),
            "a previous-token head (block 0) writes the query into the filler after it; a block-1 head there "
            "queries with it for the query's earlier occurrence (Q-composition) and reads the token before it, "
            "which a previous-token head wrote there (V-composition)",
            duplicates="lookback",
        ),
    )
}


def zoo_model_dir(name: str, root: str | Path | None = None) -> Path:
    """The exported directory of zoo model ``name`` (under ``root``, default the repository's ``zoo/``)."""
    if name not in ZOO:
        raise InputError(f"unknown zoo model {name!r}; choose from {sorted(ZOO)}")
    d = Path(root or ZOO_DIR) / name
    if not (d / "config.json").exists():
        raise FileNotFoundError(f"{d} holds no exported model: train it with scripts/train_zoo.py {name}")
    return d


def repeated_batch(n: int, length: int, *, seed: int = 0, bos: int | None = None) -> torch.Tensor:
    """``[n, (bos) + 2 * length]`` byte ids: ``length`` random bytes, then the same again (the zoo's data)."""
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(0, 256, (n, length), generator=g)
    out = torch.cat([r, r], 1)
    return out if bos is None else torch.cat([torch.full((n, 1), int(bos)), out], 1)


def predecessor_batch(n: int, length: int, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens, earlier)``: ``[n, length + 2]`` sequences ``r_1..r_L SEP r_j`` of distinct random bytes (the
    ``predecessor:`` data's format) and the position of each query's earlier occurrence ``[n]``."""
    from .data import SEP

    g = torch.Generator().manual_seed(seed)
    r = torch.stack([torch.randperm(256, generator=g)[:length] for _ in range(n)])
    j = torch.randint(1, length, (n,), generator=g)
    tokens = torch.cat([r, torch.full((n, 1), SEP), r[torch.arange(n), j][:, None]], 1)
    return tokens, j


def lookback_batch(n: int, length: int, *, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tokens, earlier)``: ``[n, length + 3]`` sequences ``r_1..r_L SEP r_j FILL`` of distinct random bytes
    other than ``FILL`` (the ``lookback:`` data's format, answered ``r_(j-1)`` at ``FILL``) and the position of
    each query's earlier occurrence ``[n]``."""
    from .data import FILL, SEP

    g = torch.Generator().manual_seed(seed)
    r = torch.stack([torch.randperm(FILL, generator=g)[:length] for _ in range(n)])
    j = torch.randint(1, length, (n,), generator=g)
    query = r[torch.arange(n), j][:, None]
    tokens = torch.cat([r, torch.full((n, 1), SEP), query, torch.full((n, 1), FILL)], 1)
    return tokens, j


def head_scores(model, *, n: int = 64, length: int = 20, seed: int = 0, duplicates: str = "repeat") -> list[dict]:
    """Per block and head: Olsson et al.'s previous-token score (queries after the first repeated token's
    predecessor), induction score and copying score on :func:`repeated_batch` sequences, and the duplicate-token
    score there (``duplicates="repeat"``) or from a query to its earlier occurrence on :func:`predecessor_batch`
    sequences (``"predecessor"``), or from the filler after a query to the query's earlier occurrence on
    :func:`lookback_batch` sequences (``"lookback"``)."""
    from ..geometry.head_scores import (
        attention_to,
        copying_score,
        duplicate_token_score,
        induction_score,
        previous_token_score,
    )

    if duplicates not in ("repeat", "predecessor", "lookback"):
        raise InputError(f"duplicates must be 'repeat', 'predecessor' or 'lookback', got {duplicates!r}")
    tokens = repeated_batch(n, length, seed=seed)
    names = [f"blocks.{l}.attn.hook_pattern" for l in range(model.cfg.n_layers)]
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names_filter=lambda k: k in names)
        if duplicates != "repeat":
            batch = predecessor_batch if duplicates == "predecessor" else lookback_batch
            queries, earlier = batch(n, length, seed=seed)
            _, qcache = model.run_with_cache(queries, names_filter=lambda k: k in names)
    w_e, w_u = model.W_E.detach(), model.W_U.detach()
    rows = []
    for layer in range(model.cfg.n_layers):
        p = cache[names[layer]]
        prev, ind = previous_token_score(p, start=2), induction_score(p, period=length)
        dup = (
            duplicate_token_score(p, period=length)
            if duplicates == "repeat"
            else attention_to(qcache[names[layer]], torch.full_like(earlier, queries.shape[1] - 1), earlier)
        )
        w_ov = model.blocks[layer].attn.W_V.detach() @ model.blocks[layer].attn.W_O.detach()
        if w_ov.shape[0] != model.cfg.n_heads:  # grouped-query attention: each head's own value head
            w_ov = torch.stack([model.W_V[layer][h] @ model.W_O[layer][h] for h in range(model.cfg.n_heads)])
        copy = copying_score(w_e, w_ov, w_u)
        rows += [
            {
                "layer": layer,
                "head": h,
                "previous_token": round(float(prev[h]), 4),
                "induction": round(float(ind[h]), 4),
                "duplicate_token": round(float(dup[h]), 4),
                "copying": round(float(copy[h]), 4),
            }
            for h in range(model.cfg.n_heads)
        ]
    return rows


def planted_heads(scores: list[dict], threshold: float = SCORE_THRESHOLD) -> dict[str, list[list[int]]]:
    """The ``[layer, head]`` pairs whose previous-token / induction / duplicate-token score exceeds ``threshold``."""
    return {
        job: [[r["layer"], r["head"]] for r in scores if r[job] > threshold]
        for job in ("previous_token", "induction", "duplicate_token")
    }


def weights_digest(directory: str | Path) -> str:
    """SHA-256 of the exported weights (``model.safetensors``)."""
    return hashlib.sha256((Path(directory) / "model.safetensors").read_bytes()).hexdigest()


def train_zoo_model(
    name: str,
    root: str | Path | None = None,
    *,
    steps: int | None = None,
    checkpoints: str | Path | None = None,
    log=print,
) -> Path:
    """Train zoo model ``name`` (resuming an interrupted run), export it to ``<root>/<name>`` with
    ``zoo.json``, and return that directory. ``steps``: a shorter run (a smoke test)."""
    from ..models import load_model
    from .cli import train_argv
    from .loop import train

    cfg = ZOO[name].config
    if steps is not None:
        cfg = dataclasses.replace(cfg, steps=steps, warmup=None, eval_every=max(1, min(cfg.eval_every, steps)))
    if checkpoints is not None:
        cfg = dataclasses.replace(cfg, out=str(Path(checkpoints) / name), data_dir=str(Path(checkpoints) / "data"))
    log_df = train(cfg, resume=True, log=log)
    seconds = float(log_df["elapsed_s"].iloc[-1])  # the training's own clock, across resumed invocations
    out = Path(root or ZOO_DIR) / name
    tmp = out.with_name(f".{name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(Path(cfg.out) / "model", tmp)
    model = load_model(str(tmp))
    scores = head_scores(model, duplicates=ZOO[name].duplicates)
    val = log_df.dropna(subset=["val_loss"])
    write_json(
        tmp / "zoo.json",
        {
            "name": name,
            "mechanism": ZOO[name].mechanism,
            "command": "tlgeo train " + " ".join(train_argv(cfg)),
            "weights_sha256": weights_digest(tmp),
            "steps": cfg.steps,
            "final_val_loss": round(float(val["val_loss"].iloc[-1]), 4) if len(val) else None,
            "train_seconds": round(seconds, 1),
            "torch": torch.__version__,
            "planted": planted_heads(scores),
            "score_threshold": SCORE_THRESHOLD,
            "head_scores": scores,
        },
        indent=2,
    )
    seal(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    log(f"{name}: {json.dumps(planted_heads(scores))} in {out}")
    return out
