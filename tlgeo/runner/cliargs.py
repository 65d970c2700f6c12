"""What every command line shares: argument types that name their flag on a bad value, the
help formatter, flags generated from an analysis config, the model/threads/out flags, and the
listing of written files.

Analyses' ``cli.py`` modules build their commands from these; :mod:`tlgeo.cli` only
dispatches. No model code here.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import time
import types
import typing
from pathlib import Path
from typing import Any, Iterable

from ..errors import InputError

__all__ = [
    "Formatter",
    "count",
    "POSITIVE",
    "TOKENS",
    "NON_NEGATIVE",
    "index_list",
    "items",
    "add_config_args",
    "config_argv",
    "config_from_args",
    "config_flags",
    "LoadConfig",
    "add_out_arg",
    "model_key",
    "print_written",
    "files_since",
    "RunRecord",
    "default_out",
    "output_dir",
]


class Formatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults in every help line that has one worth showing (not None / False), lists as
    ``a,b`` (as they are typed), never as Python tuples."""

    def _get_help_string(self, action):
        text = action.help or ""
        d = action.default
        if d is None or d is False or d == argparse.SUPPRESS or "default" in text:
            return text
        if isinstance(d, (tuple, list)):
            return f"{text} (default: {','.join(map(str, d)) or 'none'})"
        return super()._get_help_string(action)


def count(allow_zero: bool = False, what: str = "a positive integer"):
    """argparse type: an integer >= 1 (>= 0 with ``allow_zero``)."""

    def parse(v: str) -> int:
        try:
            n = int(v)
        except ValueError:
            n = None
        if n is None or n < 0 or (n == 0 and not allow_zero):
            raise argparse.ArgumentTypeError(f"must be {what}, got {v!r}")
        return n

    parse.__name__ = what
    return parse


POSITIVE = count()
TOKENS = count(allow_zero=True, what="a positive integer (0 = all)")
NON_NEGATIVE = count(allow_zero=True, what="a non-negative integer")


def index_list(v: str) -> tuple[int, ...] | None:
    """``3,5,10-12`` -> (3, 5, 10, 11, 12); ``all`` or empty -> None."""
    if v in ("", "all"):
        return None
    out: list[int] = []
    try:
        for part in v.split(","):
            if "-" in part:
                a, b = part.split("-")
                if int(b) < int(a):
                    raise ValueError
                out += range(int(a), int(b) + 1)
            else:
                out.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected indices such as 3,5,10-12 (or all), got {v!r}") from None
    return tuple(out)


index_list.__name__ = "index list"


def items(kind: type):
    """argparse type: a comma-separated list of ``kind`` as a tuple (empty entries dropped)."""

    def parse(v: str) -> tuple:
        try:
            return tuple(kind(x) for x in v.split(",") if x)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {kind.__name__}, got {v!r}") from None

    parse.__name__ = f"comma-separated {kind.__name__} list"
    return parse


@functools.cache
def _field_types(owner: type) -> dict[str, Any]:
    """``{field name: type}`` of the dataclass ``owner`` with ``X | None`` reduced to ``X`` (annotations
    may be strings; resolved once per class: a command line builds every command's flags)."""
    hints = typing.get_type_hints(owner)
    out = {}
    for f in dataclasses.fields(owner):
        t = hints.get(f.name, f.type)
        args = [a for a in typing.get_args(t) if a is not type(None)]
        if typing.get_origin(t) in (typing.Union, types.UnionType) and len(args) == 1:
            t = args[0]
        out[f.name] = t
    return out


def config_flags(cls: type, prefix: str = "") -> dict[str, dict[str, Any]]:
    """``{field name: argparse keyword arguments}`` for every field of the config ``cls`` that
    has a flag (``cli=False`` fields have none)."""
    out, types_ = {}, _field_types(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if meta.get("cli", True) is False:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        t = types_[f.name]
        kw: dict[str, Any] = {"dest": meta.get("dest", prefix + f.name), "default": default}
        cost = f"; {meta['cost']}" if meta.get("cost") else ""
        kw["help"] = meta.get("help", "") + cost
        if meta.get("indices"):
            kw.update(type=index_list, metavar="INDICES")
        elif t is bool:
            kw.update(action=argparse.BooleanOptionalAction)
        elif meta.get("item") is not None or typing.get_origin(t) is tuple:
            item = meta.get("item") or typing.get_args(t)[0]
            kw.update(type=items(item), metavar="LIST")
        elif t is int:
            kw.update(
                type=count(allow_zero=True, what="a non-negative integer") if meta.get("min", 1) == 0 else POSITIVE,
                metavar="N",
            )
        elif t is float:
            kw.update(type=float, metavar="X")
        else:
            kw.update(type=str)
        if meta.get("choices") is not None and "metavar" not in kw and t is not bool:
            kw["choices"] = tuple(meta["choices"])
        if meta.get("type") is not None:  # an argparse type of the field's own (e.g. TOKENS: 0 = all)
            kw["type"] = meta["type"]
        if meta.get("metavar") is not None:
            kw["metavar"] = meta["metavar"]
        if meta.get("required"):
            kw["required"] = True
            kw.pop("default")
        out[f.name] = {"flag": meta.get("flag", "--" + (prefix + f.name).replace("_", "-")), **kw}
        if meta.get("group"):
            out[f.name]["group"] = meta["group"]
    return out


def config_argv(cfg: Any) -> list[str]:
    """The flags of :func:`add_config_args` that make ``cfg`` (a config dataclass instance): one per
    field whose value is not its default, so that ``config_from_args`` of them gives ``cfg`` back.
    Raises ``ValueError`` naming a field set to what no flag can say (a ``cli=False`` field)."""
    flags = config_flags(type(cfg))
    argv: list[str] = []
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        if isinstance(default, list):
            default = tuple(default)
        if v == default and not flags.get(f.name, {}).get("required"):
            continue
        if f.name not in flags:
            raise InputError(f"{type(cfg).__name__}.{f.name} = {v!r} has no flag (the command sets it)")
        kw, flag = flags[f.name], flags[f.name]["flag"]
        if kw.get("action") is argparse.BooleanOptionalAction:
            argv.append(flag if v else "--no-" + flag[2:])
        elif isinstance(v, tuple):
            argv += [flag, ",".join(str(x) for x in v)]
        elif v is None:
            if kw.get("type") is not index_list:
                raise InputError(f"{type(cfg).__name__}.{f.name} = None has no flag value (its default is {default!r})")
            argv += [flag, "all"]
        else:
            argv += [flag, str(v)]
    return argv


def add_config_args(p: argparse.ArgumentParser | Any, cls: type, prefix: str = "", exclude: Iterable[str] = ()) -> None:
    """One flag per field of the config ``cls`` (``--<prefix><field>``), with its help text,
    cost and default; a field with a ``group`` goes into the parser's argument group of that title."""
    exclude = set(exclude)
    groups = {g.title: g for g in getattr(p, "_action_groups", ())}
    for name, kw in config_flags(cls, prefix).items():
        if name in exclude:
            continue
        kw = dict(kw)
        flag, title = kw.pop("flag"), kw.pop("group", None)
        target = p
        if title is not None and hasattr(p, "add_argument_group"):
            target = groups.get(title) or groups.setdefault(title, p.add_argument_group(title))
        target.add_argument(flag, **kw)


def config_from_args(cls: type, args: argparse.Namespace, prefix: str = "", **fixed: Any):
    """The config ``cls`` from the parsed flags of :func:`add_config_args` (``fixed`` wins)."""
    dests = {f.name: f.metadata.get("dest", prefix + f.name) for f in dataclasses.fields(cls)}
    values = {name: getattr(args, dest) for name, dest in dests.items() if hasattr(args, dest)}
    return cls(**{**values, **fixed})


_PLACEMENT = "device and precision"


def _memory_map(text: str) -> dict:
    out: dict = {}
    for item in text.split(","):
        dev, sep, size = item.partition("=")
        if not sep or not dev.strip() or not size.strip():
            raise argparse.ArgumentTypeError(f"{item!r}: give DEVICE=SIZE, e.g. 0=70GiB,cpu=200GiB")
        dev = dev.strip()
        out[int(dev) if dev.isdigit() else dev] = size.strip()
    return out


def _field(default: Any, help: str, **meta: Any) -> Any:
    return dataclasses.field(default=default, metadata={"help": help, **meta})


@dataclasses.dataclass(frozen=True)
class LoadConfig:
    """Which model, where and how it is loaded: the flags every command, ``tlgeo plan`` and the atlas share
    (``--model``, ``--device``, ``--dtype``, ``--device-map``, ``--max-memory``, ``--offload-folder``,
    ``--threads``). :func:`tlgeo.models.load` loads it; :meth:`load_kwargs` are :func:`tlgeo.models.load_model`'s
    keyword arguments."""

    model: str = _field(
        "smollm2-135m",
        "embedded name (smollm2-135m; gemma3-270m after TLGEO_GEMMA=1 bash "
        "scripts/setup.sh), tiny:<family> (a random model of any of the families "
        "`tlgeo models` lists), a local Hugging Face directory, or a hub name "
        "owner/name (online)",
        flag="--model",
        dest="model",
    )
    device: str = _field(
        "auto",
        "cpu, cuda, cuda:N or auto (a GPU if there is one: cuda:LOCAL_RANK under torchrun, else cpu)",
        flag="--device",
        dest="load_device",
        metavar="DEVICE",
        group=_PLACEMENT,
    )
    dtype: str = _field(
        "float32",
        "dtype of the weights (the geometry is computed in float32/float64 whatever it is)",
        choices=("float32", "bfloat16", "float16"),
        flag="--dtype",
        dest="load_dtype",
        group=_PLACEMENT,
    )
    device_map: str | None = _field(
        None,
        "shard the model over devices with accelerate: auto, balanced, sequential, "
        'or a JSON module->device map ("disk" and "cpu" offload included); '
        "--device is then ignored",
        flag="--device-map",
        dest="device_map",
        group=_PLACEMENT,
    )
    max_memory: dict | None = _field(
        None,
        "memory per device for --device-map, e.g. 0=70GiB,1=70GiB,cpu=200GiB",
        flag="--max-memory",
        dest="max_memory",
        type=_memory_map,
        group=_PLACEMENT,
    )
    offload_folder: str | None = _field(
        None,
        "folder for weights --device-map offloads to disk",
        flag="--offload-folder",
        dest="offload_folder",
        group=_PLACEMENT,
    )
    threads: int | None = _field(
        None,
        "torch CPU threads (default: all cores; under torchrun, the cores / ranks per node)",
        flag="--threads",
        dest="threads",
    )

    PLACEMENT = ("device", "dtype", "device_map", "max_memory", "offload_folder")  # what llmcompressor decides itself

    @classmethod
    def add_args(cls, p: argparse.ArgumentParser, placement: bool = True) -> None:
        """The flags (without ``placement``: ``--model`` and ``--threads`` only)."""
        add_config_args(p, cls, exclude=() if placement else cls.PLACEMENT)

    @classmethod
    def of(cls, args: argparse.Namespace) -> "LoadConfig":
        """The parsed flags of :meth:`add_args` (those a parser lacks keep their defaults)."""
        return config_from_args(cls, args)

    def load_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`tlgeo.models.load_model`."""
        device_map = self.device_map
        if device_map and device_map.lstrip().startswith("{"):
            try:
                device_map = json.loads(device_map)
            except json.JSONDecodeError as e:
                raise InputError(f"--device-map: not a JSON object ({e})") from None
        return {
            "device": self.device,
            "dtype": self.dtype,
            "device_map": device_map,
            "max_memory": self.max_memory,
            "offload_folder": self.offload_folder,
        }

    def set_threads(self) -> None:
        """``threads``; without it, under torchrun, the cores shared out among the node's ranks."""
        threads = self.threads
        ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        if not threads and ranks > 1:
            threads = max(1, (os.cpu_count() or 1) // ranks)
        if threads:
            import torch

            cores = os.cpu_count() or 1
            if (
                threads > 4 * cores
            ):  # each is an OS thread spinning on a core: hundreds on a few cores stall the machine
                raise InputError(
                    f"--threads {threads}: this machine has {cores} cores; more than 4 threads a core "
                    "only slows torch down"
                )
            torch.set_num_threads(threads)


def add_out_arg(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--out", default=None, help=f"output directory (default: {default})")


def model_key(name: str) -> str:
    """A model name as a folder name: ``tiny:llama`` -> ``tiny-llama``."""
    return name.replace("/", "_").replace(":", "-")


def _size(path: Path) -> str:
    n = float(path.stat().st_size)
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def print_written(paths: Iterable[str | Path]) -> None:
    """``wrote:`` and each existing file with its size."""
    paths = [Path(p) for p in paths if Path(p).is_file()]
    print("wrote:")
    for p in paths:
        print(f"  {p}  ({_size(p)})")


def files_since(folder: str | Path, t0: float) -> list[Path]:
    """The files under ``folder`` written at or after ``t0`` (seconds since the epoch); not tlgeo's own
    bookkeeping (the folder's lock, a cache's checksums, temporary files)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file()
        and not p.name.endswith(".tmp")
        and not p.name.startswith(".tlgeo")
        and p.stat().st_mtime >= t0 - 1
    )


class RunRecord:
    """What a command has saved so far, for its Ctrl-C message: the output folder and the
    start time; :meth:`saved` lists only files that exist and were written by this run."""

    def __init__(self, out: str | Path | None = None):
        self.out = Path(out) if out is not None else None
        self.t0 = time.time()
        self.rerun = "Rerun the same command to resume."
        self.locks: list = []  # the output folders this command holds (tlgeo.storage.folder_lock)
        self.settings: dict = {}  # what the command resolved its flags to (e.g. the atlas's budgets), for provenance

    def release(self) -> None:
        """Let go of the folders this command holds."""
        while self.locks:
            self.locks.pop().release()

    def saved(self) -> str:
        """``Saved in OUT: a.csv, b.jsonl, ranks/0-of-2 (3 files).``: each file by its path under the
        output folder, a torchrun rank's folder once, with its count."""
        files = files_since(self.out, self.t0) if self.out is not None else []
        if not files:
            return "Nothing was saved yet."
        names: dict[str, int] = {}
        for f in files:
            rel = f.relative_to(self.out).parts
            key = "/".join(rel[:2]) if rel[0] == "ranks" and len(rel) > 2 else "/".join(rel)
            names[key] = names.get(key, 0) + 1
        items = [
            k if k.count("/") != 1 or not k.startswith("ranks/") else f"{k} ({n} file{'s' * (n > 1)})"
            for k, n in names.items()
        ]
        shown = ", ".join(items[:8]) + (f" and {len(items) - 8} more" if len(items) > 8 else "")
        return f"Saved in {self.out}: {shown}."


def output_dir(args: argparse.Namespace, name: str) -> Path:
    """``--out`` (default :func:`default_out` of ``name``), made and checked writable before any
    work (a bad one is a one-line ``ValueError``), and recorded for the Ctrl-C message."""
    import tempfile

    from ..storage import folder_lock

    out = Path(args.out) if getattr(args, "out", None) else default_out(name)
    made = [p for p in (out, *out.parents) if not p.exists()]  # the folders a check makes, gone again after it
    try:
        out.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out).close()
    except OSError as e:
        raise InputError(f"--out {out}: cannot write there ({e.strerror or e})") from None
    finally:
        for p in made:  # made again by the folder's lock, or by the first file written; none for a run that fails
            with contextlib.suppress(OSError):
                p.rmdir()
    record = getattr(args, "record", None)
    if int(os.environ.get("RANK", "0")) == 0:  # torchrun: rank 0 holds the folder, each rank its rank folder
        lock = folder_lock(out).acquire(f"tlgeo {getattr(args, 'cmd', '') or name}")  # a second writer: refused
        if record is not None:
            record.locks.append(lock)
        else:
            lock.release()  # checked, not held: nobody would let go of it
    if record is not None:
        record.out = out
    return out


def default_out(name: str) -> Path:
    """Where a command writes when ``--out`` is not given: ``runs/<name>`` under the working
    directory (``$TLGEO_RUNS`` if set), never the committed ``results/``."""
    return Path(os.environ.get("TLGEO_RUNS", "runs")) / name
