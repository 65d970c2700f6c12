"""Run every registered analysis on its tiny config through :func:`tlgeo.runner.distributed.run_analysis`
into ``<out>/<analysis>``, then ``tlgeo ppl`` on the command line into ``<out>/cli``: under
``torchrun --nproc_per_node=N`` (the data-parallel test, through ``tests/torchrun_worker.py``), or alone.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/distributed/worker.py OUT [NAMES...]
"""

import sys
from pathlib import Path

import torch

from tlgeo.cli import main as tlgeo
from tlgeo.runner.distributed import ranks, run_analysis
from tlgeo.models import tiny_model
from tlgeo.report.registry import load_analyses

CLI = [
    "ppl",
    "--model",
    "tiny:llama",
    "--tokens",
    "128",
    "--context",
    "64",
    "--site",
    "value_excl_self",
    "--s-par",
    "0",
    "--layers",
    "1,2",
]  # the PplConfig the test compares with


def main(out: str, names: list[str]) -> None:
    torch.set_num_threads(1)
    model = tiny_model("llama")
    chosen = load_analyses()
    for name in names or list(chosen):
        a = chosen[name]
        res = run_analysis(a, model, a.config(**a.tiny), out=Path(out) / name)
        assert (res is None) == (ranks().rank > 0), (name, ranks())
    if not names:
        assert tlgeo([*CLI, "--out", str(Path(out) / "cli"), "--threads", "1"]) == 0


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
