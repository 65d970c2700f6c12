"""Build a fresh model as a bridge, export a trained one as an HF directory, load it back."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn

from ..errors import InputError
from ..storage import seal, write_json

from .config import ModelSpec, hf_config

__all__ = ["build_bridge", "hf_names", "export_hf", "load_trained", "load_tokenizer", "special_ids"]


def load_tokenizer(name: str = "bytes"):
    """The tokenizer a run trains with: ``"bytes"`` (tlgeo's byte tokenizer), an embedded
    model's name (``"smollm2-135m"``: its BPE tokenizer) or an HF directory."""
    from ..models import EMBEDDED_MODELS, byte_tokenizer, embedded_model_dir

    if name == "bytes":
        return byte_tokenizer()
    from transformers import AutoTokenizer

    where = embedded_model_dir(name) if name in EMBEDDED_MODELS else Path(name)
    if not (Path(where) / "tokenizer_config.json").exists() and not (Path(where) / "tokenizer.json").exists():
        raise InputError(
            f"tokenizer {name!r}: no tokenizer files in {where} (use 'bytes', "
            f"an embedded model {sorted(EMBEDDED_MODELS)} or an HF directory)"
        )
    return AutoTokenizer.from_pretrained(str(where))


def special_ids(tokenizer) -> tuple[int, int]:
    """``(bos, eos)`` ids of ``tokenizer`` (bos falls back to eos when it has none)."""
    eos = tokenizer.eos_token_id
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos
    return int(bos), int(eos)


def build_bridge(spec: ModelSpec, seed: int = 0, dtype: torch.dtype = torch.float32, tokenizer=None):
    """A randomly initialised model of ``spec`` (HF init, seeded) booted as a ``TransformerBridge``.

    ``tokenizer``: saved with the model (default: the byte tokenizer)."""
    from transformers import AutoModelForCausalLM

    from ..models import byte_tokenizer
    from ..models.bridge import boot, save_local

    tokenizer = tokenizer if tokenizer is not None else byte_tokenizer()
    bos, eos = special_ids(tokenizer)
    cfg = hf_config(spec, bos_token_id=bos, eos_token_id=eos)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        with tempfile.TemporaryDirectory(prefix="tlgeo-train-") as d:
            save_local(hf, d)  # on every rank, also where a process group exists already
            tokenizer.save_pretrained(d)
            bridge = boot(d, "cpu", dtype)
    bridge.train()
    return bridge


def hf_names(module: nn.Module, bridge) -> dict[str, str]:
    """``module``'s state-dict keys -> the HF model's state-dict names (by tensor identity;
    the bridge renames its state dict, TransformerLens-style)."""
    # a parameter is reachable under the HF path and under the bridge's aliases; the
    # first (de-duplicated) name is the HF path through "_original_component" wrappers
    by_id = {id(p): n.replace("._original_component", "") for n, p in bridge.original_model.named_parameters()}
    sd = module.state_dict(keep_vars=True)
    return {k: by_id[id(p)] for k, p in sd.items() if id(p) in by_id}


def export_hf(
    state: dict[str, torch.Tensor],
    names: dict[str, str],
    spec: ModelSpec,
    out: str | Path,
    suppression: dict,
    gate_state: dict | None = None,
    tokenizer=None,
    *,
    prepend_bos: bool = False,
) -> Path:
    """Write an ordinary HF model directory (config, safetensors, the tokenizer; default
    the byte tokenizer) plus ``suppression.json`` (and ``gate.safetensors`` for the gate)
    from a full state dict. ``suppression.json`` also says whether every training window
    began with BOS (``prepend_bos``): :func:`tlgeo.models.load_model` reads the folder the
    same way, whatever its architecture's default."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from ..models import byte_tokenizer

    out = Path(out)
    tokenizer = tokenizer if tokenizer is not None else byte_tokenizer()
    bos, eos = special_ids(tokenizer)
    hf = AutoModelForCausalLM.from_config(hf_config(spec, bos_token_id=bos, eos_token_id=eos))
    sd = {names[k]: v for k, v in state.items() if k in names}
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]  # tied to the embedding
    if missing or unexpected:
        raise RuntimeError(f"export: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    tmp = out.with_name(f".{out.name}.tmp")  # written whole, then renamed: a kill leaves no half model
    shutil.rmtree(tmp, ignore_errors=True)
    hf.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    write_json(tmp / "suppression.json", {**suppression, "prepend_bos": bool(prepend_bos)}, indent=2)
    if gate_state:
        save_file({k: v.contiguous() for k, v in gate_state.items()}, str(tmp / "gate.safetensors"))
    seal(tmp)  # load_model checks a sealed folder before it boots it
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def load_trained(directory: str | Path, dtype: torch.dtype = torch.float32):
    """``(bridge, suppression)`` of an exported run: ``suppression.hooks(bridge)`` gives
    the edit the model was trained with (empty for the baseline)."""
    from ..models import load_model
    from .suppression import Suppression

    d = Path(directory)
    bridge = load_model(str(d), dtype=dtype)
    desc = json.loads((d / "suppression.json").read_text()) if (d / "suppression.json").exists() else {}
    sup = Suppression(
        desc.get("variant", "none"),
        bridge.cfg,
        skip_first=desc.get("skip_first", 0),
        gate_site=desc.get("site") or "value_full",
    )
    if sup.variant == "gate":
        from safetensors.torch import load_file

        sup.load_state_dict(load_file(str(d / "gate.safetensors")))
    return bridge, sup
