"""The tiny atlas of the report tests (:func:`tests.report.conftest.tiny_cfg`) under torchrun, or alone.

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/report/atlas_worker.py OUT [STEPS]

``STEPS``: comma-separated (default: all); ``fail:<step>`` makes that step raise on rank 1.
"""

import sys

import torch

from tlgeo.distributed import ranks
from tlgeo.models import tiny_model
from tlgeo.report.atlas import AtlasConfig, run_atlas
from tlgeo.report.registry import load_steps

from tests.report.conftest import tiny_cfg


def main(out: str, steps: str = "", fail: str = "") -> None:
    torch.set_num_threads(1)
    if fail and ranks().rank == 1:
        step = load_steps()[fail]

        def broken(ctx):
            raise ValueError(f"{fail} broke on purpose")

        import dataclasses

        from tlgeo import analysis
        analysis._STEPS[fail] = dataclasses.replace(step, run=broken)
    cfg = tiny_cfg(out)
    if steps:
        cfg = AtlasConfig(**{**cfg.__dict__, "steps": tuple(steps.split(","))})
    path = run_atlas(cfg, model=tiny_model("llama"))
    assert (path is None) == (ranks().rank > 0), (path, ranks())


if __name__ == "__main__":
    args = dict(a.split("=", 1) for a in sys.argv[2:])
    main(sys.argv[1], args.get("steps", ""), args.get("fail", ""))
