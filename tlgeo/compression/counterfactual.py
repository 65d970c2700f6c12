"""Local-counterfactual and end-to-end error of a compressed model, per layer and site.

Sites (residual updates of a sequential pre-norm block, Llama / Gemma style):

| site  | ``Delta``                                   | reference ``z`` |
|-------|---------------------------------------------|-----------------|
| attn  | attention branch output (``hook_attn_out``) | ``resid_pre``   |
| mlp   | MLP branch output (``hook_mlp_out``)        | ``resid_mid``   |
| block | ``resid_post - resid_pre``                  | ``resid_pre``   |

(Gemma's sandwich norms: the branch output is the post-norm's output, the update
actually added to the residual stream.)

**local**: the dense model runs once per batch with forward hooks capturing, per
block, its input ``resid_pre`` with the block's keyword arguments (masks, rotary
embeddings), the attention module's output and the block output -- three tensors
per block, never a full cache. Each compressed block then runs on the dense
``resid_pre`` (its own norms: AWQ rescales them): one pass gives ``Delta_comp`` of
attn and block; a second pass with the compressed attention replaced by a replay of
the dense attention output gives the compressed MLP's update on the dense
``resid_mid`` (the attention is not recomputed). **e2e**: the compressed model runs
on its own hidden states (one forward, same hooks) and ``Delta_comp`` is its own
update, so errors compound with depth.

``e = Delta_comp - Delta_base`` is split relative to ``Delta_base`` (and to ``z``, the
``*_z`` columns) by :func:`tlgeo.compression.decompose.error_energies`.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd
import torch
from accelerate.utils import send_to_device
from torch import Tensor, nn

from .decompose import error_energies, prompt_ratios
from ..errors import InputError, UserError

__all__ = [
    "SITES",
    "IncompatibleModelsError",
    "hf_model",
    "check_compatible",
    "prompt_windows",
    "capture",
    "local_errors",
    "e2e_errors",
    "diagnose",
]

SITES = ("attn", "mlp", "block")


class IncompatibleModelsError(UserError, ValueError):
    """The dense and compressed models do not share an architecture and shapes."""


def hf_model(model) -> nn.Module:
    """The Hugging Face ``*ForCausalLM`` module of a TransformerBridge (or ``model`` itself)."""
    for attr in ("original_model", "model"):
        m = getattr(model, attr, None) if type(model).__name__ == "TransformerBridge" else None
        if isinstance(m, nn.Module) and hasattr(m, "config"):
            return m
    if isinstance(model, nn.Module) and hasattr(model, "config"):
        return model
    raise TypeError(f"expected a TransformerBridge or a Hugging Face model, got {type(model).__name__}")


def _layers(hf: nn.Module) -> nn.ModuleList:
    for path in ("model.layers", "model.language_model.layers", "language_model.model.layers"):
        m = hf
        try:
            for p in path.split("."):
                m = getattr(m, p)
        except AttributeError:
            continue
        return m
    raise IncompatibleModelsError(
        f"{type(hf).__name__}: no decoder layers at model.layers; the diagnosis supports sequential "
        "pre-norm blocks with self_attn and mlp (Llama, Mistral, Qwen, Gemma)"
    )


def _branch_modules(layer: nn.Module) -> tuple[str, nn.Module, nn.Module]:
    """(attention attribute name, module whose output is the attention update, same for the MLP)."""
    if not (hasattr(layer, "self_attn") and hasattr(layer, "mlp")):
        raise IncompatibleModelsError(f"{type(layer).__name__} has no self_attn / mlp: unsupported block")
    if hasattr(layer, "pre_feedforward_layernorm") and hasattr(layer, "post_feedforward_layernorm"):
        return "self_attn", layer.post_attention_layernorm, layer.post_feedforward_layernorm
    return "self_attn", layer.self_attn, layer.mlp


def check_compatible(base, comp) -> None:
    """Raise :class:`IncompatibleModelsError` unless ``base`` and ``comp`` have the same
    architecture, layer count, widths and parameter shapes."""
    hb, hc = hf_model(base), hf_model(comp)
    cb, cc = hb.config, hc.config
    for attr in (
        "model_type",
        "num_hidden_layers",
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
    ):
        vb, vc = getattr(cb, attr, None), getattr(cc, attr, None)
        if vb != vc:
            raise IncompatibleModelsError(f"models differ in {attr}: base {vb!r}, compressed {vc!r}")
    sb = {k: tuple(v.shape) for k, v in hb.named_parameters()}
    sc = {k: tuple(v.shape) for k, v in hc.named_parameters()}
    if sb != sc:
        diff = sorted(set(sb.items()) ^ set(sc.items()))[:3]
        raise IncompatibleModelsError(f"models differ in parameter shapes, e.g. {diff}")
    _layers(hb)


def prompt_windows(model, text: str, n: int = 12, seq_len: int = 128) -> Tensor:
    """``[n, seq_len]`` token ids: BOS (when the tokenizer has one) + consecutive text windows."""
    from ..evals.perplexity import tokenize_text

    tok = model.tokenizer if hasattr(model, "tokenizer") and model.tokenizer is not None else None
    if tok is None:
        raise InputError("model has no tokenizer; pass token ids instead")
    bos = tok.bos_token_id
    body = seq_len - (bos is not None)
    ids = tokenize_text(model, text, max_tokens=n * body + 1)
    if ids.numel() < n * body:
        raise InputError(f"text has {ids.numel()} tokens, fewer than {n} prompts x {body}")
    w = ids[: n * body].view(n, body)
    if bos is not None:
        w = torch.cat([torch.full((n, 1), bos, dtype=w.dtype), w], 1)
    return w


class _Capture:
    """Forward hooks on every block: resid_pre (+ kwargs), raw attention output, branch
    updates, block output. ``keep_inputs`` keeps what a local counterfactual needs."""

    def __init__(self, hf: nn.Module, keep_inputs: bool):
        self.layers = _layers(hf)
        self.keep_inputs = keep_inputs
        self.pre: list = [None] * len(self.layers)
        self.kwargs: list = [None] * len(self.layers)
        self.attn_raw: list = [None] * len(self.layers)
        self.d_attn: list = [None] * len(self.layers)
        self.d_mlp: list = [None] * len(self.layers)
        self.post: list = [None] * len(self.layers)
        self.handles = []
        for i, layer in enumerate(self.layers):
            _, attn_branch, mlp_branch = _branch_modules(layer)
            self.handles.append(layer.register_forward_pre_hook(self._pre(i), with_kwargs=True))
            self.handles.append(layer.register_forward_hook(self._post(i)))
            self.handles.append(layer.self_attn.register_forward_hook(self._attn_raw(i)))
            self.handles.append(attn_branch.register_forward_hook(self._store(self.d_attn, i)))
            self.handles.append(mlp_branch.register_forward_hook(self._store(self.d_mlp, i)))

    def _pre(self, i):
        def hook(mod, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            self.pre[i] = h.detach()
            if self.keep_inputs:
                self.kwargs[i] = {k: v for k, v in kwargs.items() if k != "hidden_states"}

        return hook

    def _post(self, i):
        def hook(mod, args, out):
            self.post[i] = (out[0] if isinstance(out, tuple) else out).detach()

        return hook

    def _attn_raw(self, i):
        def hook(mod, args, out):
            if self.keep_inputs:
                self.attn_raw[i] = out

        return hook

    @staticmethod
    def _store(lst, i):
        def hook(mod, args, out):
            lst[i] = (out[0] if isinstance(out, tuple) else out).detach()

        return hook

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


@contextmanager
def capture(model, keep_inputs: bool = False):
    """Context manager: hooks on every block of ``model``'s HF module; yields the capture."""
    c = _Capture(hf_model(model), keep_inputs)
    try:
        yield c
    finally:
        c.remove()


class _Replay(nn.Module):
    """Stands in for an attention module: returns a stored output, computes nothing."""

    def __init__(self, out):
        super().__init__()
        self.out = out

    def forward(self, *args, **kwargs):
        h = args[0] if args else kwargs.get("hidden_states")
        return self.out if h is None else send_to_device(self.out, h.device)


def _run_hf(hf: nn.Module, tokens: Tensor):
    device = next(hf.parameters()).device
    return hf(input_ids=tokens.to(device), use_cache=False)


def _updates(c: _Capture, i: int) -> dict[str, tuple[Tensor, Tensor]]:
    """``{site: (Delta, z)}`` of block ``i`` from a capture."""
    pre, post = c.pre[i].float(), c.post[i].float()
    d_attn, d_mlp = c.d_attn[i].float(), c.d_mlp[i].float()
    return {"attn": (d_attn, pre), "mlp": (d_mlp, pre + d_attn), "block": (post - pre, pre)}


def _rows(meta: dict, site: str, layer: int, energies: dict, first: int) -> list[dict]:
    rows = []
    for tokens, cols in prompt_ratios(energies, first).items():
        n = len(next(iter(cols.values())))
        for p in range(n):
            rows.append(
                {
                    **meta,
                    "site": site,
                    "layer": layer,
                    "tokens": tokens,
                    "prompt": p,
                    **{k: float(v[p]) for k, v in cols.items()},
                }
            )
    return rows


@torch.inference_mode()
def local_errors(
    base_capture: _Capture, comp, meta: Mapping | None = None, first: int = 1, layers: Iterable[int] | None = None
) -> pd.DataFrame:
    """Local counterfactual of every block of ``comp`` on the dense hidden states in
    ``base_capture`` (from :func:`capture` with ``keep_inputs=True`` around one dense
    forward). One row per (site, layer, tokens, prompt)."""
    hc = hf_model(comp)
    layers_c = _layers(hc)
    n = len(base_capture.layers)
    if len(layers_c) != n:
        raise IncompatibleModelsError(f"base has {n} blocks, compressed model {len(layers_c)}")
    rows = []
    for i in range(n) if layers is None else layers:
        if base_capture.pre[i] is None:
            raise RuntimeError(f"block {i} of the dense model was not captured: run a forward inside capture()")
        base = _updates(base_capture, i)
        layer = layers_c[i]
        dev = next(
            (p.device for p in layer.parameters() if p.device.type != "meta"), None
        )  # offloaded: accelerate moves
        pre, kwargs = (
            (base_capture.pre[i], base_capture.kwargs[i])
            if dev is None
            else send_to_device((base_capture.pre[i], base_capture.kwargs[i]), dev)
        )
        attn_name, attn_branch, mlp_branch = _branch_modules(layer)
        got: dict[str, Tensor] = {}
        h1 = attn_branch.register_forward_hook(
            lambda m, a, o: got.__setitem__("attn", o[0] if isinstance(o, tuple) else o)
        )
        try:
            out = layer(pre, **kwargs)
        finally:
            h1.remove()
        out = out[0] if isinstance(out, tuple) else out
        got["block"] = out.float().to(base_capture.pre[i].device) - base_capture.pre[i].float()
        attn_mod = getattr(layer, attn_name)
        setattr(layer, attn_name, _Replay(base_capture.attn_raw[i]))
        h2 = mlp_branch.register_forward_hook(
            lambda m, a, o: got.__setitem__("mlp", o[0] if isinstance(o, tuple) else o)
        )
        try:
            layer(pre, **kwargs)
        finally:
            h2.remove()
            setattr(layer, attn_name, attn_mod)
        for site in SITES:
            d_base, z = base[site]
            rows += _rows(dict(meta or {}, mode="local"), site, i, error_energies(d_base, got[site].float(), z), first)
    return pd.DataFrame(rows)


@torch.inference_mode()
def e2e_errors(
    base_capture: _Capture, comp, tokens: Tensor, meta: Mapping | None = None, first: int = 1
) -> pd.DataFrame:
    """End to end: ``comp`` runs on its own hidden states; ``e`` compares its update of
    block ``l`` with the dense update of block ``l``, decomposed relative to ``Delta_base``."""
    with capture(comp) as cc:
        _run_hf(hf_model(comp), tokens)
        rows = []
        for i in range(len(base_capture.layers)):
            base, own = _updates(base_capture, i), _updates(cc, i)
            for site in SITES:
                d_base, z = base[site]
                rows += _rows(dict(meta or {}, mode="e2e"), site, i, error_energies(d_base, own[site][0], z), first)
    return pd.DataFrame(rows)


def _load(model_or_dir, like):
    """A compressed model given as a bridge, or loaded from its directory where ``like`` (the dense
    model) is: its device, dtype and sharding."""
    if isinstance(model_or_dir, (str, os.PathLike)):
        p = Path(model_or_dir).expanduser()
        if not p.is_dir():
            raise FileNotFoundError(
                f"compressed model directory {str(p)!r} does not exist (create it with tlgeo compress)"
            )
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"{str(p)!r} has no config.json: not a Hugging Face model directory")
        from ..models import load_model, placement

        return load_model(str(p), **placement(like, offload_subfolder=f"compressed-{p.name}"))
    return model_or_dir


def diagnose(
    base,
    compressed: Mapping[str, object],
    tokens: Tensor,
    *,
    modes: Iterable[str] = ("local", "e2e"),
    batch_size: int = 12,
    first: int = 1,
    done: Iterable[str] = (),
    on_method=None,
) -> pd.DataFrame:
    """Per-prompt error ratios of every compressed model against ``base``.

    ``compressed``: ``{method: bridge, HF model or directory}`` (directories are loaded
    one at a time, after the previous one is released). ``tokens``: ``[n, t]`` prompts.
    Per batch the dense model runs once; each compressed block runs twice on it
    (local) and each compressed model once (e2e). ``done``: methods to skip;
    ``on_method(method, frame, seconds)`` is called after each method (for incremental
    writing). Returns columns ``method, mode, site, layer, tokens, prompt`` + ratios.
    """
    modes = tuple(modes)
    bad = [m for m in modes if m not in ("local", "e2e")]
    if bad:
        raise InputError(f"unknown mode(s) {bad}; choose from local, e2e")
    todo = [m for m in compressed if m not in set(done)]
    # validate all directories before the long work
    for m in todo:
        if isinstance(compressed[m], (str, os.PathLike)):
            p = Path(compressed[m]).expanduser()
            if not (p / "config.json").is_file():
                raise FileNotFoundError(
                    f"compressed model for {m!r}: directory {str(p)!r} does not exist or has no config.json "
                    "(create it with tlgeo compress)"
                )
    hb = hf_model(base)
    batches = [tokens[i : i + batch_size] for i in range(0, len(tokens), batch_size)]
    frames = []
    for m in todo:
        comp = _load(compressed[m], base)
        check_compatible(base, comp)
        t0 = time.perf_counter()
        parts = []
        for b, batch in enumerate(batches):
            with torch.inference_mode(), capture(base, keep_inputs="local" in modes) as cb:
                _run_hf(hb, batch)
                meta = {"method": m}
                if "local" in modes:
                    parts.append(
                        local_errors(cb, comp, meta, first).assign(prompt=lambda d, b=b: d["prompt"] + b * batch_size)
                    )
                if "e2e" in modes:
                    parts.append(
                        e2e_errors(cb, comp, batch, meta, first).assign(
                            prompt=lambda d, b=b: d["prompt"] + b * batch_size
                        )
                    )
        df = pd.concat(parts, ignore_index=True)
        seconds = time.perf_counter() - t0
        if on_method is not None:
            on_method(m, df, seconds)
        frames.append(df)
        del comp
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
