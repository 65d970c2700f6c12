"""torchrun set-up: DDP (gloo on CPU, NCCL on GPU) and FSDP for models that do not fit one device."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["DistInfo", "setup", "wrap", "all_mean", "barrier", "cleanup"]


@dataclass
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    mode: str = "none"

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup(mode: str = "none", device: str = "auto") -> DistInfo:
    """Initialise the process group when launched by ``torchrun`` (``WORLD_SIZE`` set).

    ``mode``: ``none`` | ``ddp`` | ``fsdp``; under torchrun ``none`` becomes ``ddp``.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1 and mode == "none":
        return DistInfo(device=torch.device(device))
    rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        torch.cuda.set_device(local)
        dev = torch.device("cuda", local)
    else:
        dev = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", rank=rank, world_size=world)
    return DistInfo(rank, world, local, dev, "ddp" if mode == "none" else mode)


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
