"""The work of the torchrun tests in one launch (each launch costs every rank an import of torch
and TransformerLens): every registered analysis and ``tlgeo ppl`` (:mod:`tests.distributed.worker`)
into ``OUT/analyses``, then the tiny atlas's shared steps into ``OUT/atlas`` and the run with a step
that fails on rank 1 into ``OUT/failed`` (:mod:`tests.report.atlas_worker`), then a tiny DDP training run
into ``OUT/train`` (:mod:`tests.train.ddp_worker`; last: training ends by leaving the process group).

    python -m torch.distributed.run --standalone --nproc_per_node=2 tests/torchrun_worker.py OUT
"""

import sys
from pathlib import Path

from tests.distributed import worker
from tests.report import atlas_worker
from tests.train import ddp_worker


def main(out: str) -> int:
    """0 when everything ran and the failed run raised :class:`RankFailed` (printed on stderr), else 1."""
    worker.main(str(Path(out) / "analyses"), [])
    failed = atlas_worker.main(
        str(Path(out) / "atlas"),
        ",".join(atlas_worker.SHARED),
        str(Path(out) / "failed"),
        ",".join(atlas_worker.FAIL_STEPS),
        atlas_worker.FAIL,
    )
    (Path(out) / "train").mkdir(parents=True, exist_ok=True)
    ddp_worker.main(str(Path(out) / "train"), "ddp")
    return 0 if failed == 3 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
