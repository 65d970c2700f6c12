"""What produced a number: a model's identity, carried by every result row and every resume key.

Two runs of the same settings give the same numbers only on the same weights, in the same dtype,
on the same class of device, placed the same way, by the same code. :func:`run_identity` names all
five (:data:`tlgeo.runner.results.IDENTITY` is the column order), so that a rerun with another model or
dtype into the same folder keeps its rows apart from the first run's and never resumes from them.

The weights' fingerprint is a hash of every parameter's name, shape and dtype, of an evenly
spaced sample of its values (:data:`SAMPLES` per tensor) and of the exact integer sum of its values'
bit patterns (a reduction per tensor, on its own device, in any order: the same on every device):
cheap on any model, the same whether the model is whole or sharded (offloaded weights are read
back from accelerate's weights map), and different for a different checkpoint or dtype, or for the
same model with a few weights changed (which a sample of values alone can miss: a pruning that zeroes a few
thousand of 134.5 M weights may leave every sampled value as it was).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Mapping, TypeVar

import torch

from .analysis import check_supported
from .cliargs import config_argv
from .provenance import code_state
from .provenance import close_run
from .results import IDENTITY, current_run, run_state
from ..storage import folder_lock
from ..version import __version__
from ..models.bridge import inputs_follow_model, is_bridge
from ..models.loading import model_label
from ..models.placement import input_device

__all__ = ["RunIdentity", "run_identity", "weights_fingerprint", "identified", "SAMPLES"]

R = TypeVar("R")

SAMPLES = 64  # values hashed per parameter tensor


@dataclass(frozen=True)
class RunIdentity:
    """A model as it ran: ``model`` (the name it was loaded by), ``weights`` (a fingerprint of its
    weights, ``fp-`` and 12 hex digits), ``dtype`` (of the weights), ``device`` (the class its token ids go to:
    ``cpu``, ``cuda``, ``mps``), ``placement`` (``whole``, or ``sharded:`` and the device classes of
    accelerate's map, e.g. ``sharded:cpu+disk``) and ``tlgeo_version``."""

    model: str
    weights: str
    dtype: str
    device: str
    placement: str
    tlgeo_version: str

    def row(self) -> dict[str, str]:
        """The identity columns of a result row, in :data:`tlgeo.runner.results.IDENTITY` order."""
        return dataclasses.asdict(self)

    @property
    def key(self) -> str:
        """8 hex digits of a hash of the identity: a folder-name part that keeps two models' files apart."""
        return hashlib.sha1(json.dumps(self.row(), sort_keys=True).encode()).hexdigest()[:8]

    def __str__(self) -> str:
        where = self.device if self.placement == "whole" else f"{self.device}, {self.placement}"
        return f"{self.model} ({self.dtype} on {where}, weights {self.weights}, tlgeo {self.tlgeo_version})"


assert tuple(f.name for f in dataclasses.fields(RunIdentity)) == IDENTITY


def _hf_model(model) -> torch.nn.Module:
    return getattr(model, "original_model", None) or model


def _offloaded_value(hf: torch.nn.Module, name: str) -> torch.Tensor | None:
    """The value of parameter ``name`` that accelerate keeps off the module (CPU or disk offload)."""
    module_name, _, leaf = name.rpartition(".")
    module = hf.get_submodule(module_name) if module_name else hf
    hook = getattr(module, "_hf_hook", None)
    weights = getattr(hook, "weights_map", None)
    if weights is None:
        return None
    try:
        return weights[leaf]
    except KeyError:
        return None


def _state(hf: torch.nn.Module) -> tuple:
    """What changes when a weight is replaced or edited in place (the fingerprint is then recomputed)."""
    return tuple((n, id(p), _version(p)) for n, p in hf.named_parameters())


def _version(p: torch.Tensor) -> int:
    """``p``'s in-place edit counter; ``data_ptr`` for an inference tensor, which keeps none."""
    try:
        return p._version
    except RuntimeError:
        return p.data_ptr()


_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_BIT_SUM_CHUNK = 1 << 20  # values per partial sum: an 8 MiB copy at most


def _bit_sum(flat: torch.Tensor) -> int:
    """The sum of ``flat``'s values read as integers of their width (wrapping at 64 bits): exact, so the same
    in any order and on any device, and changed by any change of any one value."""
    ints = flat.contiguous().view(_BITS[flat.element_size()])
    total = 0
    for chunk in ints.split(_BIT_SUM_CHUNK):  # sum(dtype=int64) copies its input at 64 bits: chunks bound that copy
        total += int(chunk.sum(dtype=torch.int64))
    return (total + 2**63) % 2**64 - 2**63  # the 64-bit wrap of torch's own sum


def weights_fingerprint(model) -> str:
    """``fp-`` and 12 hex digits of a hash of every parameter's name, shape, dtype, :data:`SAMPLES`
    evenly spaced values and :func:`_bit_sum` (cached on the model until a weight is replaced or edited in
    place)."""
    hf = _hf_model(model)
    state = _state(hf)
    cached = getattr(model, "_tlgeo_fingerprint", None)
    if cached is not None and cached[0] == state:
        return cached[1]
    h = hashlib.sha1()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            h.update(f"{name}:{tuple(p.shape)}:{str(p.dtype).removeprefix('torch.')};".encode())
            value = p if p.device.type != "meta" else _offloaded_value(hf, name)
            if value is None:  # an offloaded weight accelerate does not show: its name and shape only
                continue
            flat = value.detach().reshape(-1)
            if flat.numel():
                n = min(SAMPLES, flat.numel())
                idx = torch.arange(n, dtype=torch.long) * (flat.numel() - 1) // max(n - 1, 1)
                h.update(flat[idx.to(flat.device)].float().cpu().numpy().tobytes())
                h.update(_bit_sum(flat).to_bytes(8, "little", signed=True))
    digest = "fp-" + h.hexdigest()[:12]  # never read back from a CSV as a number
    try:
        model._tlgeo_fingerprint = (state, digest)
    except AttributeError:  # a model that takes no attributes: computed each time
        pass
    return digest


def _placement(model) -> str:
    device_map = getattr(_hf_model(model), "hf_device_map", None) or {}
    asked = (getattr(model, "tlgeo_placement", None) or {}).get("device_map")
    if not asked and len({str(v) for v in device_map.values()}) < 2:
        return "whole"
    kinds = {"cuda" if isinstance(v, int) or str(v).isdigit() else str(v).split(":")[0] for v in device_map.values()}
    return "sharded:" + "+".join(sorted(kinds))


def _dtype(model) -> str:
    dtype = (getattr(model, "tlgeo_placement", None) or {}).get("dtype")
    if dtype is None:
        p = next((p for p in _hf_model(model).parameters() if p.is_floating_point()), None)
        dtype = p.dtype if p is not None else torch.float32
    return str(dtype).removeprefix("torch.")


def run_identity(model) -> RunIdentity:
    """The identity of ``model`` as it is now (see :class:`RunIdentity`)."""
    return RunIdentity(
        model_label(model),
        weights_fingerprint(model),
        _dtype(model),
        input_device(model).type,
        _placement(model),
        __version__,
    )


def identified(run: Callable[..., R]) -> Callable[..., R]:
    """Decorate an analysis's ``run(model, cfg, ...)``: first, a model whose family the registered record
    refuses fails in one line (:func:`tlgeo.runner.analysis.check_supported`); the command (or the run from
    Python) records that it ran under the model's identity (:meth:`tlgeo.runner.results.RunState.saw`), and the
    result it returns has the identity columns in every table (the run passes the identity, :func:`run_identity`,
    to every table it delivers and every log it opens: no ambient state). With ``out=``, the run holds that folder
    (:func:`tlgeo.storage.folder_lock`): a second process writing there is refused."""

    @functools.wraps(run)
    def wrapped(model, *args: Any, **kwargs: Any) -> R:
        check_supported(wrapped, model)  # a family its record refuses fails here, before any work
        if is_bridge(model):  # a bridge booted elsewhere (TransformerBridge.boot_transformers) too
            inputs_follow_model(model)
        identity = run_identity(model).row()
        out = kwargs.get("out")
        api = out is not None and current_run() is None  # a run from Python into a folder, not inside a command
        if api:
            kwargs.setdefault("progress", True)  # as the command shows it
            code_state()  # the checkout this run has loaded, before it runs
        lock = folder_lock(out).acquire(f"{run.__module__}.run") if out is not None else None  # one writer
        try:
            with run_state() if api else contextlib.nullcontext(current_run()) as state:
                if state is not None:
                    state.saw(identity)
                result = run(model, *args, **kwargs)
        finally:
            if lock is not None:
                lock.release()
        stamp_result = getattr(result, "stamp", None)
        result = stamp_result(identity) if stamp_result is not None else result
        if api:
            cfg = args[0] if args else kwargs.get("cfg")
            settings = cfg.settings() if hasattr(cfg, "settings") else {}
            argv = command_argv(cfg, model, identity, out)
            close_run(state, out, argv, settings, [identity], python=type(cfg).__name__)
        return result

    wrapped.identified = True  # type: ignore[attr-defined]
    return wrapped


def command_argv(cfg: Any, model, identity: Mapping[str, Any], out) -> list[str] | None:
    """The ``tlgeo`` command line that makes what ``run(model, cfg, out=out)`` made from Python: the analysis's
    command (the config class's ``tlgeo_command``, set when it was registered), the model by its label and
    dtype, the config's flags; ``None`` where no command line can say it (a field that has no flag, a model
    object that no name loads)."""
    command = getattr(type(cfg), "tlgeo_command", None)
    if command is None or not model_label(model) or model_label(model) == "model":
        return None
    try:
        if hasattr(cfg, "for_command"):  # what a flag cannot hold, written beside the tables (a task of your own)
            cfg = cfg.for_command(out)
        flags = config_argv(cfg)
    except ValueError:
        return None
    dtype = [] if identity.get("dtype") == "float32" else ["--dtype", str(identity.get("dtype"))]
    return [command, "--model", model_label(model), *dtype, *flags, "--out", str(out)]
