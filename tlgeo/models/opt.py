"""TransformerLens 4.3's OPT adapter, mended: a live attention pattern (an edit of ``hook_pattern``
changes the output) and post-LN OPT (OPT-350m) booting and running. The OPT families name this
module as their ``workarounds``; :func:`tlgeo.models.bridge.boot` enters :func:`during_boot` around
every boot and calls :func:`after_boot` on OPT models."""

from __future__ import annotations

import contextlib

import torch

__all__ = ["during_boot", "after_boot", "live_pattern", "post_ln_final_norm", "post_ln_blocks"]


def _opt_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """OPT's eager attention with the bridge's ``hook_pattern`` between the softmax and the values.

    TransformerLens 4.3 runs OPT's own attention and fires ``hook_pattern`` afterwards, on the weights
    it returns, so an edit of the pattern changed nothing and ``hook_z`` fired before the pattern was
    known. Registered as a transformers attention function, this makes the pattern live: the same
    arithmetic as ``modeling_opt.eager_attention_forward``, the pattern hook in the middle, and no
    weights returned (so the bridge does not fire the hook a second time)."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask
    pattern = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    pattern = torch.nn.functional.dropout(pattern, p=dropout, training=module.training)
    hook = getattr(module, "tlgeo_hook_pattern", None)
    if hook is not None:
        pattern = hook(pattern)
    return torch.matmul(pattern, value).transpose(1, 2).contiguous(), None


def live_pattern(bridge) -> None:
    config = getattr(getattr(bridge, "original_model", None), "config", None)
    if getattr(config, "model_type", None) != "opt":
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register("tlgeo_opt_pattern", _opt_attention)
    AttentionMaskInterface.register("tlgeo_opt_pattern", eager_mask)  # eager's additive float mask
    config._attn_implementation = "tlgeo_opt_pattern"
    for block in bridge.blocks:
        block.attn.original_component.tlgeo_hook_pattern = block.attn.hook_pattern


# Two workarounds for TransformerLens 4.3's OPT adapter on post-LN OPT (do_layer_norm_before=False, OPT-350m):
# 1. it maps ``ln_final`` whenever word_embed_proj_dim == hidden_size, but a post-LN OPT has no final norm
#    ("Original component not set for model.decoder.final_layer_norm" at the first forward);
# 2. it wraps ``final_layer_norm`` (ln2) in a conversion that flattens [batch, pos, d] to [batch*pos, d] on the
#    way out, right for pre-LN (the norm runs inside HF's flattened MLP region) but wrong for post-LN, where the
#    norm runs after the view back: the next block's attention gets a 2-d tensor ("not enough values to unpack").
@contextlib.contextmanager
def post_ln_final_norm():
    from transformer_lens.model_bridge.supported_architectures import opt

    init = opt.OptArchitectureAdapter.__init__

    def patched(self, cfg):
        init(self, cfg)
        if getattr(self.cfg, "do_layer_norm_before", True) is False:
            self.component_mapping.pop("ln_final", None)

    opt.OptArchitectureAdapter.__init__ = patched
    try:
        yield
    finally:
        opt.OptArchitectureAdapter.__init__ = init


def post_ln_blocks(bridge) -> None:
    config = getattr(getattr(bridge, "original_model", None), "config", None)
    if getattr(config, "model_type", None) != "opt" or getattr(config, "do_layer_norm_before", True) is not False:
        return
    for block in bridge.blocks:
        for point in (block.ln2.hook_in, block.ln2.hook_out):
            point.hook_conversion = None


@contextlib.contextmanager
def during_boot():
    """Around the boot of any model (its family is known only once booted): post-LN OPT's adapter mended."""
    with post_ln_final_norm():
        yield


def after_boot(bridge) -> None:
    """An OPT bridge's fixes: post-LN blocks' ln2 hooks, then the live pattern."""
    post_ln_blocks(bridge)
    live_pattern(bridge)
