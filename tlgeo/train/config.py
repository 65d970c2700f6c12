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
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ARCHS", "VARIANTS", "ConfigError", "ModelSpec", "TrainConfig", "hf_config"]

ARCHS = ("gpt", "llama")
VARIANTS = ("none", "value_full", "attn", "gate", "value_excl_self")


class ConfigError(ValueError):
    """A training or model configuration that cannot work."""


@dataclass
class ModelSpec:
    """Size of a model. ``d_mlp=None``: 4x d_model (gpt) or 8/3 x d_model rounded to 32 (llama).

    ``n_kv_heads=None``: as many as ``n_heads`` (no GQA)."""

    arch: str = "gpt"
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int | None = None
    d_mlp: int | None = None
    context: int = 256
    vocab_size: int = 258
    rope_theta: float = 10000.0

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


def hf_config(spec: ModelSpec, *, bos_token_id: int = 256, eos_token_id: int = 257):
    """The Hugging Face config of ``spec`` (dropout off, tied embeddings)."""
    spec.validate()
    kv = spec.n_kv_heads or spec.n_heads
    common = dict(
        vocab_size=spec.vocab_size, hidden_size=spec.d_model, num_hidden_layers=spec.n_layers,
        num_attention_heads=spec.n_heads, num_key_value_heads=kv,
        max_position_embeddings=spec.context, tie_word_embeddings=True,
        bos_token_id=bos_token_id, eos_token_id=eos_token_id, pad_token_id=eos_token_id,
        rope_parameters={"rope_type": "default", "rope_theta": float(spec.rope_theta)},
        use_cache=False,
    )
    if spec.arch == "gpt":
        from transformers import Starcoder2Config

        return Starcoder2Config(
            intermediate_size=spec.d_mlp or 4 * spec.d_model, hidden_act="gelu_pytorch_tanh",
            use_bias=True, norm_epsilon=1e-5, residual_dropout=0.0, embedding_dropout=0.0,
            attention_dropout=0.0, sliding_window=None, **common,
        )
    from transformers import LlamaConfig

    d_mlp = spec.d_mlp or 32 * round(8 * spec.d_model / 3 / 32)
    return LlamaConfig(intermediate_size=d_mlp, rms_norm_eps=1e-5, attention_bias=False, **common)


@dataclass
class TrainConfig:
    """Everything one pretraining run needs; saved with every checkpoint.

    Optimisation follows the paper: AdamW (0.9, 0.95), weight decay 0.1 on
    matrices, clip 1.0, linear warmup then cosine decay to ``min_lr_ratio * lr``.
    ``batch_size`` is sequences per optimizer step over all ranks; each rank runs
    ``batch_size / world / grad_accum`` sequences per micro-step.
    """

    model: ModelSpec = field(default_factory=ModelSpec)
    variant: str = "none"
    skip_first: int = 0  # suppression in blocks skip_first.. (0: every block)
    gate_site: str = "value_full"
    gate_bias_init: float = 0.0  # sigmoid(0) = 0.5: half the parallel part removed at init
    data: str = "austen,mobydick,bible"
    # "bytes" (vocab 258) or a model whose tokenizer is used: an embedded name such as
    # "smollm2-135m" or an HF directory; the model's vocab_size follows the tokenizer
    tokenizer: str = "bytes"
    data_dir: str = "checkpoints/data"  # token stream cache (memmaps)
    val_frac: float = 0.01
    max_data_tokens: int | None = None
    seq_len: int = 128
    batch_size: int = 16
    grad_accum: int = 1
    steps: int = 200
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup: int = 20
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    clip: float = 1.0
    eval_every: int = 50
    eval_batches: int = 8
    save_every: int = 0  # 0: only at the end
    seed: int = 0
    device: str = "auto"
    dtype: str = "auto"  # bf16 autocast on GPU, float32 on CPU
    dist: str = "none"  # none | ddp | fsdp (set by scripts/pretrain.py under torchrun)
    threads: int = 0  # torch.set_num_threads on CPU (0: leave it)
    out: str = "checkpoints/pretrain/run"
    tensorboard: bool = False
    wandb: str | None = None  # project name

    def validate(self) -> None:
        self.model.validate()
        if self.variant not in VARIANTS:
            raise ConfigError(f"unknown suppression variant {self.variant!r}; choose from {VARIANTS}")
        if self.seq_len > self.model.context:
            raise ConfigError(f"seq_len={self.seq_len} exceeds the model context {self.model.context}")
        if self.skip_first < 0 or self.skip_first >= self.model.n_layers:
            raise ConfigError(
                f"skip_first={self.skip_first} leaves no block to suppress "
                f"(the model has {self.model.n_layers})"
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
        Path(path).write_text(json.dumps(self.to_dict(), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> "TrainConfig":
        return cls.from_dict(json.loads(Path(path).read_text()))
