"""Forwards that start at a block from a cached residual, skipping the blocks before it.

:func:`resume_forward` is what sweeps and head maps use when an edit touches
only blocks ``>= layer``: the residual entering ``layer`` is cached once from
the unedited run, and every edited run computes only blocks ``layer..`` and
the unembedding. :class:`StopForward` ends a forward from a hook once what it needs is in
hand, and :func:`readout` computes the logits of chosen positions of the last block's
output only (:func:`readout_matches` checks that this is what the model computes).
"""

from __future__ import annotations

import re
import weakref
from contextlib import contextmanager, nullcontext
from typing import Iterable, Iterator

import torch
from jaxtyping import Float
from torch import Tensor

from ..errors import InputError
from ..families import family_of
from .adapter import HookList

__all__ = [
    "resume_forward",
    "StopForward",
    "readout",
    "readout_matches",
    "readout_ok",
    "last_block_output",
    "resumed_last_block_output",
    "final_norm",
    "unembedding",
    "activations",
]


class StopForward(Exception):
    """Raised by a hook to end a forward once what it needs is in hand (catch it around the call)."""


def final_norm(model, h: Tensor) -> Tensor:
    """``ln_final(h)``; ``h`` itself where the model has no final norm (post-LN OPT: its last block
    already renormalised the residual)."""
    norm = getattr(model, "ln_final", None)
    return h if norm is None else norm(h)


def in_model_dtype(model, x: Tensor) -> Tensor:
    """``x`` (e.g. a state kept in float32) in the dtype of ``model``'s weights, to feed it back in."""
    weight = next((p for p in model.parameters() if p.is_floating_point() and p.device.type != "meta"), None)
    return x.to(weight.dtype) if weight is not None and x.is_floating_point() else x


def readout(model, final: Float[Tensor, "... d"]) -> Tensor:
    """``unembed(ln_final(h))`` of states of the last block's output (any leading shape, any float
    dtype); with OPT's ``project_out`` (word_embed_proj_dim < d_model, OPT-350m) in between."""
    shape = final.shape
    h = final_norm(model, in_model_dtype(model, final).reshape(1, -1, shape[-1]))
    project = getattr(model, "project_out", None)
    return model.unembed(h if project is None else project(h)).reshape(*shape[:-1], -1)


def unembedding(model) -> Float[Tensor, "d_model vocab"]:
    """The unembedding as it reads the (normed) residual, float32 on the CPU: ``W_U``, or with OPT's
    ``project_out`` ``P`` in between ``Pᵀ W_U`` (the direction a token's logit is read along)."""
    w_u = model.W_U.detach().float().cpu()
    project = getattr(model, "project_out", None)
    if project is not None:
        w_u = project.weight.detach().float().cpu().T @ w_u  # weight [d_proj, d_model]
    return w_u


def readout_matches(model, final: Tensor, logits: Tensor) -> bool:
    """Whether :func:`readout` of the last block's output ``[B, T, d]`` gives the model's logits at the
    last position (then a run can stop before the unembedding and read out only what it needs)."""
    got = readout(model, final[:, -1])
    return bool(torch.allclose(got.float(), logits[:, -1].float(), rtol=1e-3, atol=1e-3))


_READOUT_OK: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def readout_ok(model, tokens: Tensor) -> bool:
    """:func:`readout_matches` for ``model``, checked once (on the first row of ``tokens``) and remembered."""
    ok = _READOUT_OK.get(model)
    if ok is None:
        final = f"blocks.{model.cfg.n_layers - 1}.hook_resid_post"
        with torch.inference_mode():  # the check too: called where grad is on, it would save inference tensors
            logits, cache = model.run_with_cache(tokens[:1], names_filter=lambda n: n == final)
            ok = _READOUT_OK[model] = readout_matches(model, cache[final], logits)
    return ok


def last_block_output(model, tokens: Tensor, fwd_hooks: HookList = (), **kwargs) -> Float[Tensor, "batch pos d_model"]:
    """The last block's output of a forward with ``fwd_hooks`` (``kwargs``: the model's, e.g. an
    attention mask), which stops there: the final norm and the unembedding are left to
    :func:`readout` of the positions that are needed (check :func:`readout_ok` first)."""

    def forward(hooks: HookList) -> None:
        with model.hooks(fwd_hooks=hooks):
            model(tokens, **kwargs)

    return _stopped_at_last_block(model, forward, fwd_hooks)


def resumed_last_block_output(
    model, resid: Tensor, layer: int, fwd_hooks: HookList = ()
) -> Float[Tensor, "batch pos d_model"]:
    """:func:`last_block_output` of the forward :func:`resume_forward` resumes at block ``layer``
    from ``resid`` (the residual entering it)."""
    return _stopped_at_last_block(model, lambda hooks: resume_forward(model, resid, layer, hooks), fwd_hooks)


def activations(model, tokens: Tensor, names: Iterable[str], fwd_hooks: HookList = (), **kwargs) -> dict[str, Tensor]:
    """The activations of the hooks ``names`` in a forward with ``fwd_hooks`` (``kwargs``: the model's),
    as ``run_with_cache`` gives them, but the forward ends as soon as the last of them is read: the blocks
    after it, the final norm and the unembedding are never run."""
    wanted, got = list(dict.fromkeys(names)), {}

    def grab(name: str):  # by the name asked for (the bridge's hooks carry their canonical names)
        def fn(x: Tensor, hook) -> None:
            got[name] = x.detach()
            if len(got) == len(wanted):
                raise StopForward

        return fn

    with model.hooks(fwd_hooks=[*fwd_hooks, *[(n, grab(n)) for n in wanted]]):
        try:
            model(tokens, **kwargs)
        except StopForward:
            pass
    missing = set(wanted) - set(got)
    if missing:
        raise InputError(f"the forward never reached {sorted(missing)}")
    return got


def _stopped_at_last_block(model, forward, fwd_hooks: HookList) -> Tensor:
    """The last block's output of ``forward(hooks)``, a forward that applies the hooks handed to it,
    ended there by a hook added after ``fwd_hooks``."""
    got: list[Tensor] = []

    def stop(x: Tensor, hook) -> None:
        got.append(x)
        raise StopForward

    try:
        forward([*fwd_hooks, (f"blocks.{model.cfg.n_layers - 1}.hook_resid_post", stop)])
    except StopForward:
        pass
    return got[0]


_BLOCK_HOOK = re.compile(r"^blocks\.(\d+)\.")


@contextmanager
def _skip_blocks(model, n: int) -> Iterator[None]:
    """Make blocks ``0..n-1`` pass their input through untouched (their output is
    discarded anyway when block ``n`` swaps in the injected residual)."""

    def passthrough(*args, **kwargs):
        return args[0] if args else kwargs["hidden_states"]

    blocks = list(model.blocks)[:n]
    if any("forward" in vars(b) for b in blocks):
        raise RuntimeError("blocks already patched: resume_forward calls cannot be nested")
    # a skipped block returns no attention weights: HF models that collect them (Bloom, Falcon) would
    # index the hidden states instead (run_with_cache leaves output_attentions on). Set through the
    # property's storage: its setter refuses True for attention functions other than eager (tlgeo's OPT one)
    config = getattr(getattr(model, "original_model", None), "config", None)
    attentions = getattr(config, "_output_attentions", False)
    try:
        if attentions:
            config._output_attentions = False
        for b in blocks:
            # object.__setattr__: the bridge's __setattr__ would forward the
            # assignment to the wrapped HF layer and patch it for good
            object.__setattr__(b, "forward", passthrough)  # shadows the bound method
        yield
    finally:
        for b in blocks:
            vars(b).pop("forward", None)
        if attentions:
            config._output_attentions = attentions


def resume_forward(
    model,
    resid: Float[Tensor, "batch pos d_model"],
    layer: int,
    fwd_hooks: HookList = (),
    stop_at_layer: int | None = None,
) -> Float[Tensor, "batch pos d_vocab"] | Float[Tensor, "batch pos d_model"]:
    """Logits of the forward that enters block ``layer`` with residual ``resid`` (with
    ``stop_at_layer``: the residual entering that block, the blocks from it on not run).

    ``resid`` is ``blocks.{layer}.hook_resid_pre`` of an earlier run on the same
    tokens. TransformerBridge's ``start_at_layer`` still *runs* blocks
    ``0..layer-1`` on the residual and discards their output; here they are
    skipped, so only blocks ``layer..`` and the unembedding are computed. Hooks
    must all be at blocks ``>= layer`` (or after the blocks): hooks before would
    silently not fire, so they raise ``ValueError``. ``resid`` kept in float32 for a model in
    bfloat16 or float16 enters in the model's dtype.
    """
    n = model.cfg.n_layers
    if not 0 <= layer < n:
        raise InputError(f"layer {layer} out of range: the model has {n} layers (0..{n - 1})")
    if resid.ndim != 3 or resid.shape[-1] != model.cfg.d_model:
        raise InputError(f"resid must be [batch, pos, d_model={model.cfg.d_model}], got {tuple(resid.shape)}")
    if stop_at_layer is not None and not layer < stop_at_layer <= n:
        raise InputError(f"stop_at_layer {stop_at_layer} must be in {layer + 1}..{n}")
    hooks = list(fwd_hooks)
    for name, _ in hooks:
        if not isinstance(name, str):
            raise InputError("resume_forward needs hook names (strings), not filters")
        m = _BLOCK_HOOK.match(name)
        if (m and int(m.group(1)) < layer) or name.startswith(("hook_embed", "hook_pos_embed", "embed")):
            raise InputError(f"hook {name!r} is before block {layer}: it would not run in a forward resumed there")
    family = family_of(model)
    if family is not None and not family.start_at_layer_ok:
        # the bridge's start_at_layer fails on this family: run from placeholder tokens (their embedding and
        # position biases only), skip the blocks before ``layer`` and swap ``resid`` in at its input
        def swap(x, hook):
            return resid.to(x.dtype)

        hooks.insert(0, (f"blocks.{layer}.hook_resid_pre", swap))
        pad = getattr(getattr(model, "tokenizer", None), "pad_token_id", None)
        tokens = torch.full(resid.shape[:2], 1 if pad == 0 else 0, dtype=torch.long, device=resid.device)
        with model.hooks(fwd_hooks=hooks), _skip_blocks(model, layer):
            return model(tokens, stop_at_layer=stop_at_layer)
    resid = in_model_dtype(model, resid)
    ctx = model.hooks(fwd_hooks=hooks) if hooks else nullcontext()
    with ctx, _skip_blocks(model, layer):
        if stop_at_layer is None:
            return model(resid, start_at_layer=layer)
        return model(resid, start_at_layer=layer, stop_at_layer=stop_at_layer)
