"""Where a model is and in which dtype: device and dtype names, the device token ids go to, and
the :func:`~tlgeo.models.load_model` keywords that put a second model beside a first."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ..errors import InputError

__all__ = ["DTYPES", "resolve_dtype", "resolve_device", "input_device", "placement", "read_weights"]


DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"float32"``, ``"bfloat16"``, ``"float16"`` (or the dtype itself) as a torch dtype."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise InputError(f"dtype {dtype} is not a weight dtype tlgeo loads; choose from {list(DTYPES)}")
        return dtype
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPES:
        raise InputError(f"unknown dtype {dtype!r}; choose from {list(DTYPES)}")
    return DTYPES[name]


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """The device a model goes to: ``auto`` (or ``None``) is ``cuda:<LOCAL_RANK>`` when CUDA is
    available (one GPU per torchrun process) else ``cpu``; ``cuda`` / ``cuda:N`` must exist."""
    if device is None or str(device) == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise InputError(f"unknown device {device!r}: give cpu, cuda, cuda:N or auto ({e})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(
                f"device {device!r}: CUDA is not available here (torch {torch.__version__}, "
                f"{'a CPU-only build' if torch.version.cuda is None else 'no GPU visible'}); "
                "use --device cpu or auto"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(f"device {device!r}: only {torch.cuda.device_count()} GPU(s) visible")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"device {device!r}: MPS is not available here")
    return dev


def input_device(model) -> torch.device:
    """Where a model's token ids go: its embedding's device (the first block's, for a model
    sharded over several devices)."""
    for p in model.parameters():
        if p.device.type != "meta":  # offloaded weights sit on "meta" until their module runs
            return p.device
    return torch.device("cpu")


def placement(model, *, offload_subfolder: str | None = None) -> dict:
    """The :func:`load_model` keywords that put ``model`` where it is (device, dtype, sharding), to
    load a second model of the same shape beside it (e.g. a compressed copy). A model not loaded by
    :func:`load_model` gets its first weights' device and dtype. A disk offload gets
    ``offload_subfolder`` inside the model's own folder, so the two never share files."""
    kw = dict(getattr(model, "tlgeo_placement", None) or {})
    if not kw:
        p = next((p for p in model.parameters() if p.device.type != "meta"), None)
        kw = {"device": input_device(model), "dtype": p.dtype if p is not None else torch.float32}
    if kw.get("offload_folder") is not None:
        if offload_subfolder is None:
            raise InputError("the model is offloaded to disk: give offload_subfolder for the second model's files")
        kw["offload_folder"] = str(Path(kw["offload_folder"]) / offload_subfolder)
    return kw


def read_weights(module, *names: str, copy: bool = True) -> tuple:
    """``module``'s attributes ``names`` (e.g. ``"W_O", "b_O"``; ``None`` where it has none) as detached
    copies, read from accelerate's offload where a dispatched module keeps its weights on the meta device
    outside a forward (a model larger than memory, ``--device-map``); a model in memory pays nothing. With
    ``copy`` False, a module in memory gives detached views of its own weights (to read, never to write)."""
    from contextlib import ExitStack

    with ExitStack() as stack:
        for mod in module.modules():
            if getattr(mod, "_hf_hook", None) is not None and any(
                p is not None and p.device.type == "meta" for p in mod._parameters.values()
            ):
                from accelerate.utils import align_module_device

                stack.enter_context(align_module_device(mod))
                copy = True  # the weights are in place only inside this context
        out = []
        for name in names:
            try:
                v = getattr(module, name, None)
            except AttributeError:  # a bridge property that finds no such weight
                v = None
            out.append(None if v is None else v.detach().clone() if copy else v.detach())
        return tuple(out)
