"""Data parallelism of a training run: DDP or FSDP2 around the model being trained, on the process
group that :func:`tlgeo.runner.distributed.init` joins (the one every analysis under torchrun joins: gloo on
CPU, NCCL on GPU), and the reductions the loop needs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ..runner.distributed import init, ranks

__all__ = ["DistInfo", "setup", "wrap", "all_mean", "barrier", "cleanup"]


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the run (from :func:`tlgeo.runner.distributed.ranks`), its device and the wrapping."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    mode: str = "none"

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup(mode: str = "none", device: str = "auto") -> DistInfo:
    """Join the process group when launched by ``torchrun`` (``WORLD_SIZE`` > 1; FSDP needs one even
    alone). ``mode``: ``none`` | ``ddp`` | ``fsdp``; under torchrun ``none`` becomes ``ddp``. A
    CUDA ``device`` is ``cuda:LOCAL_RANK``."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    r = ranks()
    dev = torch.device("cuda", r.local_rank) if device.startswith("cuda") else torch.device("cpu")
    if r.size == 1 and mode == "none":
        return DistInfo(device=torch.device(device))
    init(dev, alone=True)
    return DistInfo(r.rank, r.size, r.local_rank, dev, "ddp" if mode == "none" else mode)


def wrap(module: nn.Module, info: DistInfo, blocks: list[nn.Module] | None = None) -> nn.Module:
    """DDP around ``module``, or FSDP2 (``fully_shard``, CPU/gloo and GPU alike): each of
    ``blocks`` is its own shard unit, then the root."""
    if info.mode == "ddp" and info.world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        return DDP(module, device_ids=[info.local_rank] if info.device.type == "cuda" else None)
    if info.mode == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(info.device.type, (info.world,))
        for b in blocks or []:
            fully_shard(b, mesh=mesh)
        fully_shard(module, mesh=mesh)
    return module


def all_mean(x: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """The mean of ``x`` over the ranks (``x`` itself alone)."""
    if info.world > 1:
        x = x.clone()
        dist.all_reduce(x)
        x /= info.world
    return x


def barrier(info: DistInfo) -> None:
    if info.world > 1:
        dist.barrier()


def cleanup(info: DistInfo) -> None:
    if info.world > 1 and dist.is_initialized():
        dist.destroy_process_group()
