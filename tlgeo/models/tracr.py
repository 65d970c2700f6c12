"""tracr-compiled models as Hugging Face models, and their TransformerLens bridge adapter.

tracr (Lindner et al. 2023) compiles a RASP program to a transformer whose every weight is known: one-hot token
and position embeddings (a constant ``one`` direction in every token's), then per layer an attention block and a
ReLU MLP, each added to the residual stream, no norm anywhere, and an unembedding that projects the residual onto
the program's output space. :class:`TracrForCausalLM` is that model in torch (attention as tracr's Haiku module
computes it: biases, scores scaled by ``1/sqrt(head_dim)``, masked scores set to ``-1e30``), causal or
bidirectional as the program was compiled (``config.causal``). The norms a block would have are identities
(``ln1``, ``ln2``, ``ln_f``), so the bridge's ``hook_resid_mid`` (``ln2.hook_in``) exists as in every family.

:func:`register` makes ``model_type`` ``tracr`` known to transformers' Auto classes and ``TracrForCausalLM`` to
TransformerLens's adapter factory; the bridge's boot imports this module (the family's ``workarounds``), so
``load_model("zoo/tracr-frac-prevs")`` boots a compiled program. ``scripts/compile_tracr.py`` writes the folders.
"""

from __future__ import annotations

from ..errors import InputError
import contextlib
import math
from typing import Any, Callable, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from ..families.tracr_config import TracrConfig

__all__ = [
    "TracrConfig",
    "TracrForCausalLM",
    "TracrModel",
    "adapter_class",
    "register",
    "during_boot",
    "after_boot",
    "MASKED",
]

MASKED = -1e30  # tracr's score for a masked key (jnp.where(mask, logits, -1e30))


class TracrAttention(nn.Module):
    """Multi-head attention as tracr compiles it; returns ``(out [b, s, d], pattern [b, h, s, s])``.

    ``accepts_pattern_fn``: the bridge hands its ``hook_pattern`` in as ``pattern_fn``, applied before the values
    are weighted, so an edit of the pattern changes the output."""

    accepts_pattern_fn = True

    def __init__(self, config: TracrConfig, layer_idx: int = 0):
        super().__init__()
        self.n_heads, self.head_dim, self.causal = config.num_attention_heads, config.head_dim, config.causal
        self.layer_idx = layer_idx
        inner = self.n_heads * self.head_dim
        self.q_proj = nn.Linear(config.hidden_size, inner)
        self.k_proj = nn.Linear(config.hidden_size, inner)
        self.v_proj = nn.Linear(config.hidden_size, inner)
        self.o_proj = nn.Linear(inner, config.hidden_size)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        pattern_fn: Optional[Callable[[torch.Tensor], torch.Tensor]] = None,
        past_key_values: Optional[DynamicCache] = None,
        **kwargs: Any,
    ):
        b, s, _ = hidden_states.shape

        def heads(x: torch.Tensor) -> torch.Tensor:
            return x.view(b, s, self.n_heads, self.head_dim).transpose(1, 2)

        x = hidden_states
        q, k, v = heads(self.q_proj(x)), heads(self.k_proj(x)), heads(self.v_proj(x))
        if past_key_values is not None:  # generation: the earlier positions' keys and values, then these
            k, v = past_key_values.update(k, v, self.layer_idx)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        keep = _keep(s, k.shape[2], self.causal, attention_mask, scores.device)
        scores = scores.masked_fill(~keep, MASKED)
        pattern = torch.softmax(scores.float(), dim=-1).to(v.dtype)
        if pattern_fn is not None:
            pattern = pattern_fn(pattern)
        z = torch.matmul(pattern, v).transpose(1, 2).reshape(b, s, self.n_heads * self.head_dim)
        return self.o_proj(z), pattern


def _keep(s: int, t: int, causal: bool, attention_mask: Optional[torch.Tensor], device) -> torch.Tensor:
    """Which of ``t`` keys each of the last ``s`` queries sees, ``[b or 1, 1, s, t]``: the causal triangle (all
    keys, bidirectional), less those a 2-D padding mask (1 = keep) or a 4-D mask (bool: True = keep; additive:
    < -1 = masked) takes away."""
    keep = torch.ones(s, t, dtype=torch.bool, device=device)
    if causal:
        keep = keep.tril(diagonal=t - s)
    keep = keep[None, None]
    if attention_mask is None:
        return keep
    if attention_mask.dim() == 2:
        return keep & attention_mask[:, None, None, -t:].bool().to(device)
    if attention_mask.dim() == 4:
        m = attention_mask[..., -s:, -t:].to(device)
        return keep & (m if m.dtype == torch.bool else m > -1.0)
    raise InputError(f"attention_mask must be 2-D [batch, seq] or 4-D, got shape {tuple(attention_mask.shape)}")


class TracrMLP(nn.Module):
    """``fc_out(relu(fc_in(x)))``: tracr's MLP (Haiku's ``linear_1``, ReLU, ``linear_2``)."""

    def __init__(self, config: TracrConfig):
        super().__init__()
        self.fc_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.fc_out = nn.Linear(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(F.relu(self.fc_in(x)))


class TracrLayer(nn.Module):
    """One tracr layer: ``h + attn(h)``, then ``+ mlp(.)``; ``ln1`` and ``ln2`` are identities (no norm)."""

    def __init__(self, config: TracrConfig, layer_idx: int = 0):
        super().__init__()
        self.ln1, self.self_attn = nn.Identity(), TracrAttention(config, layer_idx)
        self.ln2, self.mlp = nn.Identity(), TracrMLP(config)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        past_key_values: Optional[DynamicCache] = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        attn = self.self_attn(self.ln1(hidden_states), attention_mask=attention_mask, past_key_values=past_key_values)[
            0
        ]
        hidden_states = hidden_states + attn
        return hidden_states + self.mlp(self.ln2(hidden_states))


class TracrPreTrainedModel(PreTrainedModel):
    config_class = TracrConfig
    base_model_prefix = "model"
    _no_split_modules = ["TracrLayer"]
    _supports_attention_backend = False

    def _init_weights(self, module: nn.Module) -> None:
        """Random weights for a tiny test model (a compiled program's are loaded over them)."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)


class TracrModel(TracrPreTrainedModel):
    """Token + position embeddings, the layers, the final identity ``ln_f``: the residual stream ``[b, s, d]``."""

    def __init__(self, config: TracrConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.layers = nn.ModuleList(TracrLayer(config, i) for i in range(config.num_hidden_layers))
        self.ln_f = nn.Identity()
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        inputs_embeds: Optional[torch.Tensor] = None,
        past_key_values: Optional[DynamicCache] = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        """The final residual ``[b, s, d]``; ``past_key_values`` (a ``DynamicCache``) is extended in place."""
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        s = past + inputs_embeds.shape[1]
        if s > self.config.max_position_embeddings:
            raise InputError(
                f"{s} positions: this model has {self.config.max_position_embeddings} "
                f"(a compiled program: BOS and max_seq_len = {self.config.max_position_embeddings - 1})"
            )
        if position_ids is None:
            position_ids = torch.arange(past, s, device=inputs_embeds.device)[None]
        h = inputs_embeds + self.embed_positions(position_ids)
        for layer in self.layers:
            h = layer(h, attention_mask=attention_mask, past_key_values=past_key_values)
        return self.ln_f(h)


class TracrForCausalLM(TracrPreTrainedModel):
    """:class:`TracrModel` and ``lm_head``, tracr's unembedding (``[output_size, d]``): the logits are the
    residual's coordinates on the output space (a numerical program: its one value)."""

    _tied_weights_keys: dict = {}

    def __init__(self, config: TracrConfig):
        super().__init__(config)
        self.model = TracrModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.output_size, bias=False)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.model.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.model.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def forward(
        self,
        input_ids: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        inputs_embeds: Optional[torch.Tensor] = None,
        labels: Optional[torch.Tensor] = None,
        past_key_values: Optional[DynamicCache] = None,
        use_cache: Optional[bool] = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast:
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        h = self.model(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            past_key_values=past_key_values,
        )
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=past_key_values if use_cache else None)


def _adapter_class():
    from transformer_lens.model_bridge.architecture_adapter import ArchitectureAdapter
    from transformer_lens.model_bridge.generalized_components import (
        AttentionBridge,
        BlockBridge,
        EmbeddingBridge,
        LinearBridge,
        MLPBridge,
        PosEmbedBridge,
        UnembeddingBridge,
    )
    from transformer_lens.model_bridge.generalized_components.base import GeneralizedComponent

    class TracrArchitectureAdapter(ArchitectureAdapter):
        """The bridge over :class:`TracrForCausalLM`: no norm (the identities wrapped as plain components, so
        ``ln1`` / ``ln2`` hooks exist and do nothing), learned absolute positions, split q/k/v/o with biases,
        a ReLU MLP, attention causal or not as the config says."""

        def __init__(self, cfg: Any) -> None:
            super().__init__(cfg)
            self.cfg.normalization_type = None
            self.cfg.positional_embedding_type = "standard"
            self.cfg.final_rms = False
            self.cfg.gated_mlp = False
            self.cfg.attn_only = False
            self.supports_fold_ln = False
            self.supports_center_writing_weights = False
            self.weight_processing_conversions = {**self._qkvo_weight_conversions(include_biases=True)}
            causal = bool(getattr(cfg, "causal", True))
            self.component_mapping = {
                "embed": EmbeddingBridge(name="model.embed_tokens"),
                "pos_embed": PosEmbedBridge(name="model.embed_positions"),
                "blocks": BlockBridge(
                    name="model.layers",
                    config=self.cfg,
                    submodules={
                        "ln1": GeneralizedComponent(name="ln1", config=self.cfg),
                        "attn": AttentionBridge(
                            name="self_attn",
                            config=self.cfg,
                            is_causal=causal,
                            submodules={
                                "q": LinearBridge(name="q_proj"),
                                "k": LinearBridge(name="k_proj"),
                                "v": LinearBridge(name="v_proj"),
                                "o": LinearBridge(name="o_proj"),
                            },
                        ),
                        "ln2": GeneralizedComponent(name="ln2", config=self.cfg),
                        "mlp": MLPBridge(
                            name="mlp",
                            submodules={"in": LinearBridge(name="fc_in"), "out": LinearBridge(name="fc_out")},
                        ),
                    },
                ),
                "ln_final": GeneralizedComponent(name="model.ln_f", config=self.cfg),
                "unembed": UnembeddingBridge(name="lm_head"),
            }

    return TracrArchitectureAdapter


_REGISTERED: dict[str, Any] = {}


def register() -> None:
    """Make ``model_type`` ``tracr`` known to transformers' Auto classes and ``TracrForCausalLM`` to
    TransformerLens's adapter factory (idempotent)."""
    if _REGISTERED:
        return
    from transformer_lens.factories import architecture_adapter_factory as factory

    AutoConfig.register("tracr", TracrConfig, exist_ok=True)
    AutoModelForCausalLM.register(TracrConfig, TracrForCausalLM, exist_ok=True)
    adapter = _adapter_class()
    factory.SUPPORTED_ARCHITECTURES["TracrForCausalLM"] = adapter
    factory.ArchitectureAdapterFactory.register_adapter("TracrForCausalLM", adapter)
    _REGISTERED["adapter"] = adapter


def adapter_class() -> type:
    """``TracrArchitectureAdapter``, the TransformerLens adapter of :class:`TracrForCausalLM` (built on first use:
    TransformerLens is imported only when a model boots)."""
    register()
    return _REGISTERED["adapter"]


@contextlib.contextmanager
def during_boot() -> Iterator[None]:
    """The family's boot hook: the Auto classes and the adapter registered before the bridge boots."""
    register()
    yield


def after_boot(bridge) -> None:
    """The bridge's config told the program's mask, in TransformerLens's own field (``cfg.attention_dir``:
    ``"causal"`` or ``"bidirectional"``, which also makes the bridge mask the padding of a batch), and its output
    width (``cfg.d_vocab_out``: the output space, which TransformerLens takes to be the input vocabulary's size)."""
    config = bridge.original_model.config
    bridge.cfg.attention_dir = "causal" if bool(getattr(config, "causal", True)) else "bidirectional"
    bridge.cfg.d_vocab_out = int(config.output_size)
