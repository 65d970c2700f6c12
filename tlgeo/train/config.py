"""Architectures (as Hugging Face configs) and the training configuration.

Two architectures, both plain Hugging Face models so that a trained checkpoint
is an ordinary HF directory that :func:`tlgeo.load_model` boots:

* ``gpt``: the paper's GPT (RoPE, biased LayerNorm, GELU 4x MLP, tied
  embeddings), as a ``Starcoder2Config`` with ``use_bias=True``,
  ``tie_word_embeddings=True`` and sequential residual blocks. (GPT-NeoX was the
  first candidate, but its bridge splits the fused QKV weight into copies that
  train apart from the HF weight; Starcoder2 keeps separate q/k/v projections
  and every bridge parameter is the HF parameter.)
* ``llama``: RMSNorm, SwiGLU MLP, grouped-query attention, tied embeddings
  (``LlamaConfig``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..runner.analysis import Config, param
from ..storage import write_json

__all__ = ["ARCHS", "VARIANTS", "ConfigError", "ModelSpec", "TrainConfig", "hf_config", "warmup_for"]

ARCHS = ("gpt", "llama")
VARIANTS = ("none", "value_full", "attn", "gate", "value_excl_self")


class ConfigError(UserError, ValueError):
    """A training or model configuration that cannot work."""


@dataclass(frozen=True)
class ModelSpec(Config):
    """Size of a model. ``d_mlp=None``: 4x d_model (gpt) or 8/3 x d_model rounded to 32 (llama).

    ``n_kv_heads=None``: as many as ``n_heads`` (no GQA)."""

    arch: str = param("gpt", "gpt: LayerNorm/GELU/RoPE; llama: RMSNorm/SwiGLU/GQA", choices=ARCHS, group="model")
    d_model: int = param(128, "residual width", group="model")
    n_layers: int = param(4, "blocks", flag="--layers", group="model")
    n_heads: int = param(4, "query heads per block", flag="--heads", group="model")
    n_kv_heads: int | None = param(None, "GQA key/value heads (default: --heads)", flag="--kv-heads", group="model")
    d_mlp: int | None = param(None, "MLP width (default: 4 d_model for gpt, the Llama ratio for llama)", group="model")
    context: int = param(256, "the model's maximum positions", group="model")
    vocab_size: int = param(258, "vocabulary (follows --tokenizer)", cli=False)
    rope_theta: float = param(10000.0, "RoPE base", group="model")

    def validate(self) -> None:
        if self.arch not in ARCHS:
            raise ConfigError(f"unknown architecture {self.arch!r}; choose from {ARCHS}")
        for name in ("d_model", "n_layers", "n_heads", "context", "vocab_size"):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        kv = self.n_kv_heads or self.n_heads
        if kv <= 0 or self.n_heads % kv:
            raise ConfigError(
                f"n_heads={self.n_heads} is not divisible by n_kv_heads={kv}: grouped-query "
                "attention needs each KV head to serve the same number of query heads"
            )


def warmup_for(steps: int) -> int:
    """The default warm-up of a run of ``steps`` steps: 20, at most a tenth of the run."""
    return min(20, max(0, int(steps) // 10))


def hf_config(spec: ModelSpec, *, bos_token_id: int = 256, eos_token_id: int = 257):
    """The Hugging Face config of ``spec`` (dropout off, tied embeddings)."""
    kv = spec.n_kv_heads or spec.n_heads
    common = dict(
        vocab_size=spec.vocab_size,
        hidden_size=spec.d_model,
        num_hidden_layers=spec.n_layers,
        num_attention_heads=spec.n_heads,
        num_key_value_heads=kv,
        max_position_embeddings=spec.context,
        tie_word_embeddings=True,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=eos_token_id,
        rope_parameters={"rope_type": "default", "rope_theta": float(spec.rope_theta)},
        use_cache=False,
    )
    if spec.arch == "gpt":
        from transformers import Starcoder2Config

        return Starcoder2Config(
            intermediate_size=spec.d_mlp or 4 * spec.d_model,
            hidden_act="gelu_pytorch_tanh",
            use_bias=True,
            norm_epsilon=1e-5,
            residual_dropout=0.0,
            embedding_dropout=0.0,
            attention_dropout=0.0,
            sliding_window=None,
            **common,
        )
    from transformers import LlamaConfig

    d_mlp = spec.d_mlp or 32 * round(8 * spec.d_model / 3 / 32)
    return LlamaConfig(intermediate_size=d_mlp, rms_norm_eps=1e-5, attention_bias=False, **common)


@dataclass(frozen=True)
class TrainConfig(Config):
    """Everything one pretraining run needs; saved with every checkpoint. Every field but ``model``
    (``ModelSpec``'s own flags) and ``betas`` is a flag of ``tlgeo train``.

    Optimisation follows the paper: AdamW (0.9, 0.95), weight decay 0.1 on
    matrices, clip 1.0, linear warmup then cosine decay to ``min_lr_ratio * lr``.
    ``batch_size`` is sequences per optimizer step over all ranks; each rank runs
    ``batch_size / world / grad_accum`` sequences per micro-step. ``warmup=None``:
    :func:`warmup_for` ``steps`` (20, at most a tenth of the run).
    """

    model: ModelSpec = param(ModelSpec(), "the architecture and its size", cli=False)
    variant: str = param(
        "none",
        "what is suppressed: none, the parallel part at a site, or a learned gate",
        choices=VARIANTS,
        group="suppression",
    )
    skip_first: int = param(0, "suppress in blocks skip_first.. (0: every block)", min=0, group="suppression")
    gate_site: str = param("value_full", "site of the learned gate (--variant gate)", group="suppression")
    gate_bias_init: float = param(
        0.0, "initial gate bias (sigmoid(0) = 0.5: half the parallel part removed)", group="suppression"
    )
    data: str = param(
        "austen,mobydick,bible",
        "comma-separated corpora / text files / "
        "hf:<dataset>[:<config>[:<split>]] / repeat:<n>[-<m>][:<seed>] "
        "(random byte halves of n..m tokens repeated: induction data) / "
        "predecessor:<n>[-<m>][:<seed>] (each query token followed by the "
        "token before it: V-composition data) / lookback:<n>[-<m>][:<seed>] (the same "
        "answered after a filler: Q- and V-composition data)",
        group="data",
    )
    tokenizer: str = param(
        "bytes",
        "bytes, or a model whose tokenizer to train with (smollm2-135m, an HF directory); the vocabulary follows it",
        group="data",
    )
    data_dir: str = param("checkpoints/data", "token stream cache (memory-mapped)", group="data")
    val_frac: float = param(0.01, "share of the tokens held out for validation", group="data")
    max_data_tokens: int | None = param(None, "cap per source", group="data")
    seq_len: int = param(128, "tokens per training sequence", group="optimisation")
    batch_size: int = param(16, "sequences per optimizer step, over all ranks", group="optimisation")
    grad_accum: int = param(1, "micro-batches accumulated per optimizer step", group="optimisation")
    steps: int = param(200, "optimizer steps", group="optimisation")
    lr: float = param(1e-3, "peak learning rate (AdamW)", group="optimisation")
    min_lr_ratio: float = param(0.1, "final learning rate as a fraction of the peak", group="optimisation")
    warmup: int | None = param(
        None,
        "linear warm-up steps before the cosine decay (default: 20, at most a tenth of --steps)",
        min=0,
        group="optimisation",
    )
    weight_decay: float = param(0.1, "AdamW weight decay", group="optimisation")
    betas: tuple[float, float] = param((0.9, 0.95), "AdamW betas", cli=False)
    clip: float = param(1.0, "gradient-norm clip", group="optimisation")
    eval_every: int = param(50, "steps between validation losses", group="optimisation")
    eval_batches: int = param(8, "batches per validation loss", group="optimisation")
    save_every: int = param(0, "steps between checkpoints (0: only at the end)", min=0, group="optimisation")
    seed: int = param(0, "seed of the initialisation and the data order", min=0, group="optimisation")
    device: str = param("auto", "cpu, cuda, cuda:1, ...", group="optimisation")
    dtype: str = param("auto", "auto (bf16 autocast on GPU), bf16, fp32", group="optimisation")
    dist: str = param("none", "data parallelism under torchrun", choices=("none", "ddp", "fsdp"), group="optimisation")
    threads: int = param(0, "torch CPU threads (0: torch's own choice)", min=0, group="optimisation")
    out: str = param("checkpoints/pretrain/run", "run directory: log.csv, checkpoint.pt, model/", group="output")
    tensorboard: bool = param(False, "also log to TensorBoard in <out>/tb", group="output")
    wandb: str | None = param(None, "also log to this Weights & Biases project", group="output")

    def __post_init__(self) -> None:
        if self.warmup is None:
            object.__setattr__(self, "warmup", warmup_for(self.steps))
        super().__post_init__()

    def validate(self) -> None:
        if not isinstance(self.model, ModelSpec):
            raise ConfigError(f"model must be a ModelSpec, got {type(self.model).__name__}")
        if self.variant not in VARIANTS:
            raise ConfigError(f"unknown suppression variant {self.variant!r}; choose from {VARIANTS}")
        if self.seq_len > self.model.context:
            raise ConfigError(f"seq_len={self.seq_len} exceeds the model context {self.model.context}")
        if self.skip_first < 0 or self.skip_first >= self.model.n_layers:
            raise ConfigError(
                f"skip_first={self.skip_first} leaves no block to suppress (the model has {self.model.n_layers})"
            )
        for name in ("seq_len", "batch_size", "grad_accum", "steps", "eval_batches"):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.warmup < 0 or self.warmup > self.steps:
            raise ConfigError(f"warmup={self.warmup} must be between 0 and steps={self.steps}")
        if not 0.0 < self.val_frac < 0.5:
            raise ConfigError(f"val_frac={self.val_frac} must be in (0, 0.5)")
        if self.dist not in ("none", "ddp", "fsdp"):
            raise ConfigError(f"dist must be none, ddp or fsdp, got {self.dist!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def settings(self) -> dict:
        return self.to_dict()

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        d = dict(d)
        d["model"] = ModelSpec(**d.get("model", {}))
        if "betas" in d:
            d["betas"] = tuple(d["betas"])
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown training option(s) {unknown}")
        return cls(**d)

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_dict(), indent=2)

    @classmethod
    def load(cls, path: str | Path) -> "TrainConfig":
        return cls.from_dict(json.loads(Path(path).read_text()))
