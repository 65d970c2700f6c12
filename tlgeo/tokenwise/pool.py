"""A pool of token states at every layer, collected once and memory-mapped on disk.

:func:`collect_pool` runs a model over token windows and stores, for every
layer map ``l = 0 .. L-1``, the states entering it, ``h_l``, and leaving it,
``h_{l+1}``: ``states_<l>.npy`` holds ``h_l`` for ``l = 0 .. L`` (``float16`` by
default, ``float32`` on request), plus each token's window and position. Later
steps read layers through :class:`StatePool` without rerunning the model.

Any causal LM whose blocks it can hook:

* a TransformerBridge: ``blocks.0.hook_resid_pre`` and ``blocks.l.hook_resid_post``;
* a plain Hugging Face model (e.g. transformers' Mamba, where TransformerLens has
  no bridge): forward hooks on its list of layers (its family's ``layer_path``;
  for a model of no known family, the first of the families' paths, ``layers``
  or ``h`` it has): the input of the first and the output of each, before any
  final norm.

Collection writes window by window and records how many windows are done, so an
interrupted run resumes where it stopped.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor, nn

from ..errors import InputError
from ..families import family_of_config, layer_paths
from ..models import Model
from ..runner.identity import run_identity
from ..models.bridge import is_bridge
from ..hooks.resume import activations
from ..runner.results import content_digest
from ..storage import MANIFEST, atomic_write, check, is_sealed, seal, verify, write_json

__all__ = ["StatePool", "collect_pool", "layer_list"]

_BASE_LAYER_PATHS = ("layers", "h")  # a bare base model (no LM head): its layers at the top


def layer_list(model: Model) -> nn.ModuleList:
    """The list of blocks of a plain HF causal LM: at its family's ``layer_path``, or (no known
    family, or a base model) the first list found at a family's path (``ValueError`` when none is)."""
    family = family_of_config(getattr(model, "config", None))
    paths = tuple(dict.fromkeys(((family.layer_path,) if family else ()) + layer_paths() + _BASE_LAYER_PATHS))
    for path in paths:
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, nn.ModuleList) and len(obj):
            return obj
    raise InputError(f"no list of layers found on {type(model).__name__} (looked for {', '.join(paths)})")


def _states_bridge(model, tokens: torch.Tensor) -> list[torch.Tensor]:
    n = model.cfg.n_layers
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{l}.hook_resid_post" for l in range(n)]
    got = activations(model, tokens, names)  # ends at the last block: no unembedding
    return [got[name] for name in names]


def _states_hf(model, tokens: torch.Tensor) -> list[torch.Tensor]:
    layers = layer_list(model)
    got: dict[int, torch.Tensor] = {}

    def pre(_, args, kwargs):
        got[0] = (args[0] if args else kwargs["hidden_states"]).detach()

    def post(i):
        def fn(_, args, output):
            got[i + 1] = (output[0] if isinstance(output, (tuple, list)) else output).detach()

        return fn

    handles = [layers[0].register_forward_pre_hook(pre, with_kwargs=True)]
    handles += [layer.register_forward_hook(post(i)) for i, layer in enumerate(layers)]
    try:
        model(input_ids=tokens.to(next(model.parameters()).device))
    finally:
        for h in handles:
            h.remove()
    return [got[i] for i in range(len(layers) + 1)]


def n_layer_maps(model: Model) -> int:
    return model.cfg.n_layers if is_bridge(model) else len(layer_list(model))


@dataclass
class StatePool:
    """States ``h_0 .. h_L`` of ``n_tokens`` tokens, read from ``directory`` (memory-mapped)."""

    directory: Path
    n_tokens: int
    d_model: int
    n_layers: int  # layer maps; states 0..n_layers
    dtype: str
    window: np.ndarray  # [n_tokens] the token's window (sequence)
    position: np.ndarray  # [n_tokens]

    @property
    def windows(self) -> torch.Tensor:
        """The token windows the states came from, ``[n_windows, seq_len]``."""
        return torch.from_numpy(np.load(self.directory / "tokens.npy"))

    @classmethod
    def open(cls, directory: str | Path) -> "StatePool":
        d = Path(directory)
        meta = json.loads((d / "meta.json").read_text())
        if meta["done_windows"] < meta["n_windows"]:
            raise InputError(
                f"{d}: the pool is incomplete ({meta['done_windows']} of {meta['n_windows']} windows); "
                "run collect_pool again to finish it"
            )
        check(d, "the state pool", _pool_files(int(meta["n_layers"])))  # a damaged file is never read as states
        idx = np.load(d / "index.npy")
        return cls(d, int(meta["n_tokens"]), int(meta["d_model"]), int(meta["n_layers"]), meta["dtype"], idx[0], idx[1])

    def states(self, l: int) -> np.ndarray:
        """``h_l`` of every token, ``[n_tokens, d_model]`` (memory-mapped, read-only)."""
        if not 0 <= l <= self.n_layers:
            raise InputError(f"state {l} out of range: the pool has states 0..{self.n_layers}")
        return np.load(self.directory / f"states_{l}.npy", mmap_mode="r")

    def pair(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(h_layer, h_layer+1)`` as float32 tensors, for layer map ``layer``."""
        if not 0 <= layer < self.n_layers:
            raise InputError(f"layer {layer} out of range: the pool has layer maps 0..{self.n_layers - 1}")
        return (
            torch.from_numpy(np.array(self.states(layer), dtype=np.float32)),
            torch.from_numpy(np.array(self.states(layer + 1), dtype=np.float32)),
        )


def _check_windows(windows: Int[Tensor, "n seq"], dtype: str, skip_first: int) -> None:
    """Raise on a pool dtype other than float16/float32 or windows too short for ``skip_first``."""
    if dtype not in ("float16", "float32"):
        raise InputError(f"dtype must be float16 or float32, got {dtype!r}")
    if windows.ndim != 2 or windows.shape[1] <= skip_first:
        raise InputError(
            f"windows must be [n, seq_len] with seq_len > skip_first={skip_first}, got shape {tuple(windows.shape)}"
        )


def _pool_settings(model: Model, windows: Int[Tensor, "n seq"], skip_first: int, dtype: str) -> dict:
    """The settings a pool's ``meta.json`` records: a directory holding others is not this pool."""
    n_win, seq = windows.shape
    return {
        "n_windows": n_win,
        "seq_len": seq,
        "skip_first": skip_first,
        "dtype": dtype,
        "n_tokens": n_win * (seq - skip_first),
        "n_layers": n_layer_maps(model),
        "d_model": model.cfg.d_model if is_bridge(model) else model.config.hidden_size,
        "tokens": content_digest(windows),
        "identity": run_identity(model).row(),
    }


def _resumed_meta(d: Path, settings: dict) -> dict | None:
    """The meta of the pool in ``d`` to resume (``None``: none, or a damaged finished one); other settings raise."""
    meta_path = d / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else None
    if meta is not None and {k: meta.get(k) for k in settings} != settings:
        other = {k: meta.get(k) for k in settings if meta.get(k) != settings[k]}
        raise InputError(
            f"{d} holds a pool of other settings ({', '.join(f'{k} {v}' for k, v in other.items())}); "
            "use another directory"
        )
    if meta is not None and is_sealed(d):  # a finished pool: collected again if a file of it is damaged
        bad = verify(d, _pool_files(settings["n_layers"]))
        if bad:
            print(f"the state pool {d} is damaged ({bad[0]}): collecting it again", file=sys.stderr, flush=True)
            for f in [d / MANIFEST, *d.glob("neighbours_*.npy")]:
                f.unlink(missing_ok=True)
            meta = None
    return meta


def _new_pool(d: Path, files: list[Path], windows: Int[Tensor, "n seq"], settings: dict) -> dict:
    """Empty state files, the index and the tokens of a new pool in ``d``, and its meta (no window done)."""
    n_win, seq, skip_first = settings["n_windows"], settings["seq_len"], settings["skip_first"]
    shape = (settings["n_tokens"], settings["d_model"])
    for f in files:
        np.lib.format.open_memmap(f, mode="w+", dtype=settings["dtype"], shape=shape)
    _save_npy(
        d / "index.npy",
        np.stack([np.repeat(np.arange(n_win), seq - skip_first), np.tile(np.arange(skip_first, seq), n_win)]),
    )
    _save_npy(d / "tokens.npy", windows.cpu().numpy())
    meta = {**settings, "done_windows": 0}
    write_json(d / "meta.json", meta)
    return meta


def _batch_starts(n_win: int, batch_size: int, ranks) -> tuple[list[int], tuple[int, int]]:
    """This rank's batches' first windows, and its share of the windows as ``(first, end)``."""
    starts = list(range(0, n_win, batch_size))
    if ranks is not None and ranks.size > 1:
        from ..runner.distributed import deal

        starts = deal(starts, ranks.rank, ranks.size)
    share = (starts[0], min(starts[-1] + batch_size, n_win)) if starts else (n_win, n_win)
    return starts, share


def _collect_batches(
    model: Model,
    windows: Int[Tensor, "n seq"],
    mm: list,
    meta: dict,
    meta_path: Path,
    starts: Iterable[int],
    batch_size: int,
) -> None:
    """Each batch's states at every layer into ``mm``, then ``meta``'s windows done (``done_windows``) on disk."""
    skip_first, d_model, dtype = meta["skip_first"], meta["d_model"], meta["dtype"]
    per = meta["seq_len"] - skip_first
    for s in starts:
        batch = windows[s : s + batch_size]
        with torch.inference_mode():
            states = _states_bridge(model, batch) if is_bridge(model) else _states_hf(model, batch)
        rows = slice(s * per, (s + len(batch)) * per)
        for l, h in enumerate(states):
            mm[l][rows] = h[:, skip_first:].reshape(-1, d_model).float().cpu().numpy().astype(dtype)
        for m in mm:
            m.flush()
        meta["done_windows"] = s + len(batch)
        write_json(meta_path, meta)  # after the states are flushed: a kill before it redoes this batch


def collect_pool(
    model: Model,
    windows: Int[Tensor, "n seq"],
    out_dir: str | Path,
    *,
    dtype: str = "float16",
    batch_size: int = 8,
    skip_first: int = 1,
    progress: bool = False,
    ranks=None,
) -> StatePool:
    """Collect the states of every token of ``windows [n_windows, seq_len]`` at every layer.

    ``skip_first``: leading positions of each window left out (default 1: BOS, whose
    states are outliers). A directory holding the same settings is resumed or reused.
    ``ranks`` (:class:`tlgeo.runner.distributed.Ranks` of a torchrun job whose process group is up): each
    rank runs the forwards of its contiguous share of the batches only, then the ranks all-gather
    the states layer by layer, so every rank ends with the whole pool (the same batches as one
    process: the same states, bit for bit at equal thread counts)."""
    _check_windows(windows, dtype, skip_first)
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    settings = _pool_settings(model, windows, skip_first, dtype)
    n_maps, n_win = settings["n_layers"], settings["n_windows"]
    meta = _resumed_meta(d, settings)
    files = [d / f"states_{l}.npy" for l in range(n_maps + 1)]
    if meta is None:
        meta = _new_pool(d, files, windows, settings)
    mm = [np.load(f, mmap_mode="r+") for f in files]
    starts, share = _batch_starts(n_win, batch_size, ranks)
    it = [s for s in starts if s >= meta["done_windows"]]
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(it, desc="collecting states", leave=False)
    _collect_batches(model, windows, mm, meta, d / "meta.json", it, batch_size)
    if ranks is not None and ranks.size > 1:
        _share_states(mm, meta, d / "meta.json", share, settings["seq_len"] - skip_first, ranks)
    del mm
    if not is_sealed(d):
        seal(d, _pool_files(n_maps))  # whole: from now on a damaged file is found before it is read
    return StatePool.open(d)


def _pool_files(n_maps: int) -> list[str]:
    return [*(f"states_{l}.npy" for l in range(n_maps + 1)), "index.npy", "tokens.npy"]


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with atomic_write(path, "wb") as f:
        np.save(f, arr)


def _share_states(mm: list, meta: dict, meta_path: Path, share: tuple[int, int], per: int, ranks) -> None:
    """All-gather every rank's windows ``share`` of each layer's states into every rank's ``mm``."""
    import torch.distributed as dist

    n_win = meta["n_windows"]
    done: list = [None] * ranks.size
    dist.all_gather_object(done, meta.get("shared", False))
    if all(done):  # every rank's pool is whole already (a rerun)
        return
    shares: list = [None] * ranks.size
    dist.all_gather_object(shares, share)
    for m in mm:  # one layer at a time: at most one layer's pool in flight
        parts: list = [None] * ranks.size
        dist.all_gather_object(parts, np.asarray(m[share[0] * per : share[1] * per]))
        for (a, b), rows in zip(shares, parts):
            m[a * per : b * per] = rows
        m.flush()
    meta.update(done_windows=n_win, shared=True, collected=list(share))
    write_json(meta_path, meta)
