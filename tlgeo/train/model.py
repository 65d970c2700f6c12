"""Build a fresh model as a bridge, export a trained one as an HF directory, load it back."""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn

from .config import ModelSpec, hf_config

__all__ = ["build_bridge", "hf_names", "export_hf", "load_trained"]


def build_bridge(spec: ModelSpec, seed: int = 0, dtype: torch.dtype = torch.float32):
    """A randomly initialised model of ``spec`` (HF init, seeded) booted as a ``TransformerBridge``."""
    from transformers import AutoModelForCausalLM

    from ..models import _boot, byte_tokenizer

    cfg = hf_config(spec)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        with tempfile.TemporaryDirectory(prefix="tlgeo-train-") as d:
            hf.save_pretrained(d)
            byte_tokenizer().save_pretrained(d)
            bridge = _boot(d, "cpu", dtype)
    bridge.train()
    return bridge


def hf_names(module: nn.Module, bridge) -> dict[str, str]:
    """``module``'s state-dict keys -> the HF model's state-dict names (by tensor identity;
    the bridge renames its state dict, TransformerLens-style)."""
    # a parameter is reachable under the HF path and under the bridge's aliases; the
    # first (de-duplicated) name is the HF path through "_original_component" wrappers
    by_id = {id(p): n.replace("._original_component", "")
             for n, p in bridge.original_model.named_parameters()}
    sd = module.state_dict(keep_vars=True)
    return {k: by_id[id(p)] for k, p in sd.items() if id(p) in by_id}


def export_hf(state: dict[str, torch.Tensor], names: dict[str, str], spec: ModelSpec,
              out: str | Path, suppression: dict, gate_state: dict | None = None) -> Path:
    """Write an ordinary HF model directory (config, safetensors, byte tokenizer) plus
    ``suppression.json`` (and ``gate.safetensors`` for the gate) from a full state dict."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from ..models import byte_tokenizer

    out = Path(out)
    hf = AutoModelForCausalLM.from_config(hf_config(spec))
    sd = {names[k]: v for k, v in state.items() if k in names}
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]  # tied to the embedding
    if missing or unexpected:
        raise RuntimeError(f"export: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    hf.save_pretrained(out)
    byte_tokenizer().save_pretrained(out)
    (out / "suppression.json").write_text(json.dumps(suppression, indent=2))
    if gate_state:
        save_file({k: v.contiguous() for k, v in gate_state.items()}, str(out / "gate.safetensors"))
    return out


def load_trained(directory: str | Path, dtype: torch.dtype = torch.float32):
    """``(bridge, suppression)`` of an exported run: ``suppression.hooks(bridge)`` gives
    the edit the model was trained with (empty for the baseline)."""
    from ..models import load_model
    from .suppression import Suppression

    d = Path(directory)
    bridge = load_model(str(d), dtype=dtype)
    desc = json.loads((d / "suppression.json").read_text()) if (d / "suppression.json").exists() else {}
    sup = Suppression(desc.get("variant", "none"), bridge.cfg, skip_first=desc.get("skip_first", 0),
                      gate_site=desc.get("site") or "value_full")
    if sup.variant == "gate":
        from safetensors.torch import load_file

        sup.load_state_dict(load_file(str(d / "gate.safetensors")))
    return bridge, sup
