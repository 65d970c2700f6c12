"""Data-parallel runs of an analysis: its work units dealt out over the ranks of ``torchrun``,
each rank's partial result gathered to rank 0 through ``torch.distributed``, merged and saved once.

    torchrun --nproc_per_node=2 -m tlgeo pdsf --model smollm2-135m          # 2 processes, one machine
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d \\
        --rdzv_endpoint=HOST:29500 -m tlgeo pdsf --model Qwen/Qwen3-8B --out /shared/pdsf   # 2 machines

A single process (no ``WORLD_SIZE`` in the environment) runs the analysis as it is. Under
torchrun each rank loads its own copy of the model (``--device auto`` is ``cuda:LOCAL_RANK``),
runs its share of :attr:`~tlgeo.runner.analysis.Analysis.units` (:func:`deal`: a contiguous run, balanced
by the analysis's ``cost`` estimates) into its own folder
``<out>/ranks/<rank>-of-<size>`` (where its resume logs live: rerun the same command with the
same number of ranks after an interruption), and rank 0 writes the merged tables into ``out``.
Rows are the same as a single process's. The backend is NCCL for CUDA models and gloo otherwise.
"""

from __future__ import annotations

import atexit
import contextvars
import itertools
import os
import signal
import socket
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..errors import InputError
from .analysis import Analysis, Result, check_supported
from .results import read_table
from ..models import input_device

__all__ = [
    "run_command",
    "Ranks",
    "RankFailed",
    "RankDied",
    "dead_ranks",
    "stopping",
    "ranks",
    "init",
    "deal",
    "rank_folder",
    "run_analysis",
    "all_errors",
    "all_ranks_busy",
]


@dataclass(frozen=True)
class Ranks:
    """This process's place in a torchrun job (``size`` 1 without torchrun)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


class RankFailed(RuntimeError):
    """A rank of a torchrun job failed: raised on every rank, with each failed rank's one line."""


class RankDied(KeyboardInterrupt):
    """Another rank of this torchrun job died (killed, out of memory): raised on a survivor when torchrun
    stops it. A ``KeyboardInterrupt``, so that it unwinds as Ctrl-C does (what was saved stays whole)."""


_PEERS: list[tuple[str, int]] = []  # (host, pid) of every rank, by rank, once the process group is up
_STOPPING = False  # this process is already saying why it stops: a later SIGTERM changes nothing


def ranks() -> Ranks:
    """The torchrun environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``)."""
    env = os.environ
    size = int(env.get("WORLD_SIZE", "1"))
    return Ranks(
        int(env.get("RANK", "0")), size, int(env.get("LOCAL_RANK", "0")), int(env.get("LOCAL_WORLD_SIZE", str(size)))
    )


def init(device: torch.device | str | None = None, alone: bool = False) -> Ranks:
    """Join the process group once (NCCL on a CUDA ``device``, else gloo); a no-op in a process that
    is not one of several, unless ``alone`` (a group of one: FSDP needs it)."""
    import torch.distributed as dist

    r = ranks()
    if (r.size > 1 or alone) and not dist.is_initialized():
        cuda = device is not None and torch.device(device).type == "cuda"
        if cuda:
            torch.cuda.set_device(torch.device(device))
        timeout = timedelta(seconds=float(os.environ.get("TLGEO_DIST_TIMEOUT", 24 * 3600)))
        dist.init_process_group("nccl" if cuda else "gloo", rank=r.rank, world_size=r.size, timeout=timeout)
        atexit.register(lambda: dist.is_initialized() and dist.destroy_process_group())
        peers: list = [None] * r.size
        dist.all_gather_object(peers, (socket.gethostname(), os.getpid()))  # who to look for if one dies
        _PEERS[:] = peers
        try:
            signal.signal(signal.SIGTERM, _terminated)  # torchrun stops the others when a rank dies
        except ValueError:  # not the main thread: SIGTERM keeps its default
            pass
    return r


def _terminated(signum, frame) -> None:
    """SIGTERM as Ctrl-C: the command line says in one line what is saved and how to resume. torchrun
    sends it to the survivors when a rank dies: then :class:`RankDied`, naming that rank."""
    global _STOPPING
    if _STOPPING:
        return
    _STOPPING = True
    dead = dead_ranks()
    if dead:
        raise RankDied(dead)
    raise KeyboardInterrupt


def stopping() -> None:
    """This process is stopping on an error it reports itself: a SIGTERM from here on is ignored."""
    global _STOPPING
    _STOPPING = True


def dead_ranks() -> str:
    """The ranks of this job whose process is gone (those on this machine; ``""`` if none is known to be):
    ``rank 1 (pid 4242) has died (killed or out of memory)``."""
    import psutil

    host, dead = socket.gethostname(), []
    for i, (h, pid) in enumerate(_PEERS):
        if h != host or pid == os.getpid():
            continue
        try:
            gone = psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
        except psutil.NoSuchProcess:
            gone = True
        if gone:
            dead.append(f"rank {i} (pid {pid})")
    if not dead:
        return ""
    return f"{' and '.join(dead)} {'has' if len(dead) == 1 else 'have'} died (killed or out of memory)"


def deal(units: Sequence, rank: int, size: int, costs: Sequence[float] | None = None) -> list:
    """The units of ``rank``: one contiguous run of ``units``, cut so that the ranks' summed
    ``costs`` (default 1 each) are as even as the order allows. Contiguous keeps a stage's units
    together (the work they share is done on fewer ranks) and the ranks' results, concatenated
    in rank order, in the units' order."""
    if not 0 <= rank < size:
        raise InputError(f"rank {rank} out of 0..{size - 1}")
    units = list(units)
    costs = [1.0] * len(units) if costs is None else [float(c) for c in costs]
    if len(costs) != len(units) or any(c < 0 for c in costs):
        raise InputError(f"need one cost >= 0 per unit: {len(units)} units, costs {costs}")
    cum = [0.0, *itertools.accumulate(costs)]
    starts = [0]
    for r in range(1, size):  # the cut nearest to r/size of the total (ties: the later, lower ranks first)
        target = cum[-1] * r / size
        starts.append(min(range(starts[-1], len(units) + 1), key=lambda j: (abs(cum[j] - target), -j)))
    starts.append(len(units))
    return units[starts[rank] : starts[rank + 1]]


_ALL_BUSY: contextvars.ContextVar[bool] = contextvars.ContextVar("tlgeo_all_ranks_busy", default=False)


def all_ranks_busy() -> bool:
    """Inside :func:`run_analysis` under torchrun: whether every rank got units, so that every rank's
    ``run`` may meet the others in a collective (e.g. to share out a token pool)."""
    return _ALL_BUSY.get()


def rank_folder(out: str | os.PathLike, r: Ranks) -> Path:
    """Where rank ``r`` writes its partial tables and resume logs."""
    return Path(out) / "ranks" / f"{r.rank}-of-{r.size}"


def run_analysis(
    analysis: Analysis,
    model,
    cfg,
    *,
    out: str | os.PathLike | None = None,
    progress: bool = False,
    on_table: Callable[[str, Any], Any] | None = None,
    **kwargs: Any,
) -> Result | None:
    """``analysis.run(model, cfg, out=out, ...)``, split over the ranks of a torchrun job.

    Alone: exactly ``analysis.run``. Under torchrun: this rank's units (:func:`deal`) into
    :func:`rank_folder`, the partial results gathered to rank 0, which merges them
    (:meth:`Result.merge`), saves them into ``out``, calls ``on_table`` on each merged table
    and returns the result; the other ranks return ``None``. ``progress`` shows on rank 0 only.
    """
    if ranks().size > 1:  # each rank's run checks it too; here every rank fails alike, before the process group
        check_supported(analysis.run, model)
    r = init(input_device(model))
    extra = {"on_table": on_table} if on_table is not None else {}
    if r.size == 1:
        return analysis.run(model, cfg, out=out, progress=progress, **extra, **kwargs)
    import torch.distributed as dist

    units = analysis.units(model, cfg)
    costs = [analysis.cost(model, cfg, u) for u in units] if analysis.cost is not None else None
    mine = deal(units, r.rank, r.size, costs)
    part, error = None, None
    busy = _ALL_BUSY.set(all(deal(units, i, r.size, costs) for i in range(r.size)))
    try:
        if mine:  # more ranks than units: this one has nothing to do
            folder = None if out is None else rank_folder(out, r)
            part = analysis.run(model, cfg, out=folder, units=mine, progress=progress and r.main, **kwargs)
    except Exception as e:  # noqa: BLE001 - the other ranks wait in the gather: every rank raises below
        error = f"{analysis.name}: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
        print(f"[{analysis.name}] rank {r.rank}: {error}", file=sys.stderr, flush=True)
    finally:
        _ALL_BUSY.reset(busy)
    parts: list | None = [None] * r.size if r.main else None
    dist.gather_object(part, parts, dst=0)
    all_errors(error, r)  # what the other ranks finished is in their rank folders: a rerun resumes it
    if not r.main:
        return None
    from .identity import run_identity

    merged = analysis.result.merge([p for p in parts if p is not None])
    return merged.deliver(out, on_table, identity=run_identity(model).row())


def run_command(
    analysis: Analysis,
    args,
    *,
    out_name: str | None = None,
    check: Callable[[Any], Any] | None = None,
    prepare: Callable[[Any, Any, Path], Any] | None = None,
    show: Callable[[Any], Callable[[str, Any], Any]] | None = None,
) -> tuple[Result | None, Any, Path]:
    """What ``tlgeo <command>`` of ``analysis`` does before it prints, in the order that fails early: the threads,
    the config from the flags (a bad value fails before the model loads), ``check(cfg)`` (the command's own input
    checks: a corpus, a prompt set), the output folder (``--out``, default ``runs/<out_name or the model>``: an
    unwritable one fails first), the model (:class:`~tlgeo.runner.cliargs.LoadConfig`), ``prepare(model, cfg, out)``
    (checks that need the model; what the Ctrl-C line should say) and :func:`run_analysis`, with ``show(cfg)`` as
    its ``on_table`` (what the command prints of each table as it is done). A config of the analysis that ``check``
    or ``prepare`` returns replaces ``cfg`` (e.g. window lengths fitted to the model's context). Returns ``(result,
    cfg, out)``; the result is ``None`` on the torchrun ranks other than 0 (rank 0 writes)."""
    from .cliargs import LoadConfig, config_from_args, model_key, output_dir
    from ..models import load_model

    load = LoadConfig.of(args)
    load.set_threads()
    cfg = config_from_args(analysis.config, args)
    check_before_loading(load.model, cfg, getattr(args, "shape_of", None))
    if check is not None:
        cfg = _config_or(check(cfg), cfg, analysis)
    out = output_dir(args, out_name or model_key(load.model))
    for t in analysis.result.TABLES:  # a damaged table is refused before the model loads (one cut short is said)
        if (out / t.filename).is_file():
            read_table(out / t.filename, as_text=True)
    model = load_model(load.model, **load.load_kwargs())
    if prepare is not None:
        cfg = _config_or(prepare(model, cfg, out), cfg, analysis)
    on_table = show(cfg) if show is not None else None
    return run_analysis(analysis, model, cfg, out=out, progress=True, on_table=on_table), cfg, out


def check_before_loading(name: str, cfg: Any = None, shape_of: Callable[[str], Any] | None = None) -> None:
    """What can be checked of a run before its model's weights load, in one line: the model's name
    (:func:`tlgeo.models.loading.check_model_name`: an unknown model leaves no output folder behind), then ``cfg``
    against the model's shape (``Config.check_shape``: a block index out of range), ``shape_of(name)`` (the
    command line's: :func:`tlgeo.cli.shape_before_loading`, from the model's config alone), where it says one (a
    model whose shape nothing says is checked once it loads)."""
    from ..models.loading import check_model_name

    check_model_name(name)
    if cfg is not None and shape_of is not None and (shape := shape_of(name)) is not None:
        cfg.check_shape(shape)


def _config_or(returned: Any, cfg: Any, analysis: Analysis) -> Any:
    """``returned`` where a command's check gave a new config of ``analysis``, else ``cfg``."""
    return returned if isinstance(returned, analysis.config) else cfg


def all_errors(error: str | None, r: Ranks) -> None:
    """Every rank says whether it failed (``error``: its one line, or ``None``); if any did, raise
    :class:`RankFailed` on every rank, naming each failed rank (alone: raise on ``error``)."""
    if r.size == 1:
        if error is not None:
            raise RankFailed(error)
        return
    import torch.distributed as dist

    errors: list = [None] * r.size
    dist.all_gather_object(errors, error)
    failed = [f"rank {i}: {e}" for i, e in enumerate(errors) if e is not None]
    if failed:
        raise RankFailed("; ".join(failed))
