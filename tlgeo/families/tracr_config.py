"""The Hugging Face config of a tracr-compiled model (``model_type`` ``tracr``): a transformer with no norm, one-hot
token and position embeddings, ReLU MLPs and an unembedding onto the program's output space. The model itself is
:mod:`tlgeo.models.tracr`; ``scripts/compile_tracr.py`` writes these configs for the zoo's programs."""

from __future__ import annotations

from ..errors import InputError
from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

__all__ = ["TracrConfig"]


@strict
class TracrConfig(PreTrainedConfig):
    """``hidden_size``: the residual stream (one direction per value of every RASP variable, as tracr lays it out);
    ``head_dim``: tracr's key size (its value size too); ``output_size``: the unembedding's width (the output space's
    values, or 1 for a numerical program; ``None``: ``vocab_size``); ``causal``: the program's attention mask;
    ``output_kind``: ``categorical`` (the answer is the argmax of the outputs) or ``numerical`` (the one output)."""

    model_type = "tracr"

    vocab_size: int = 8
    hidden_size: int = 16
    num_hidden_layers: int = 2
    num_attention_heads: int = 1
    head_dim: int = 8
    intermediate_size: int = 8
    output_size: int | None = None
    max_position_embeddings: int = 8
    causal: bool = True
    hidden_act: str = "relu"
    output_kind: str = "categorical"
    initializer_range: float = 0.2
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    tie_word_embeddings: bool = False

    def __post_init__(self, **kwargs):
        if self.output_size is None:
            self.output_size = self.vocab_size
        super().__post_init__(**kwargs)

    def validate_architecture(self):
        """One line naming the bad value (``output_kind``, the activation)."""
        if self.output_kind not in ("categorical", "numerical"):
            raise InputError(f"output_kind must be 'categorical' or 'numerical', got {self.output_kind!r}")
        if self.hidden_act != "relu":
            raise InputError(f"tracr's MLPs are ReLU MLPs: hidden_act must be 'relu', got {self.hidden_act!r}")
